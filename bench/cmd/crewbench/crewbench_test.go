package main

import (
	"slices"
	"testing"
	"time"
)

func TestMaxConcurrency(t *testing.T) {
	cases := []struct {
		name string
		iv   []interval
		want int
	}{
		{"none", nil, 0},
		{"disjoint", []interval{{0, 10}, {20, 30}}, 1},
		{"touching ends do not overlap", []interval{{0, 10}, {10, 20}}, 1},
		{"nested", []interval{{0, 100}, {10, 20}, {15, 30}}, 3},
		{"two pairs", []interval{{0, 10}, {5, 15}, {20, 30}, {25, 35}}, 2},
	}
	for _, c := range cases {
		if got := maxConcurrency(c.iv); got != c.want {
			t.Errorf("%s: maxConcurrency = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestHandoffs(t *testing.T) {
	// cap 1: each start follows the previous end.
	got := handoffs([]interval{{0, 10}, {12, 20}, {25, 30}})
	want := []time.Duration{2, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("cap 1: handoffs = %v, want %v", got, want)
	}
	// cap 2: the two initial starts are not handoffs; the slot freed
	// longest ago (at 10) goes to the start at 36, the one freed at 35 to
	// the start at 40.
	got = handoffs([]interval{{0, 10}, {1, 35}, {36, 50}, {40, 60}})
	want = []time.Duration{26, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("cap 2: handoffs = %v, want %v", got, want)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if got := percentile(ds, 50); got != 3 {
		t.Errorf("median = %v, want 3", got)
	}
	if got := percentile([]time.Duration{1, 2, 3, 4}, 50); got != 2 {
		t.Errorf("even median = %v, want 2 (mean of 2 and 3, truncated)", got)
	}
	if got := percentile(ds, 90); got != 5 {
		t.Errorf("p90 = %v, want 5", got)
	}
	if got := percentile(nil, 50); got != -1 {
		t.Errorf("empty = %v, want -1", got)
	}
}

// The harness copies crew's records: a record rendered as crew renders
// it (json.MarshalIndent, two spaces, final newline) must round-trip, and
// a new instance must change only identity and times.
func TestTemplateInstance(t *testing.T) {
	const rec = `{
  "version": 1,
  "runId": "r-20261129T132208.955796439Z-e160a01517034179",
  "task": "t",
  "state": "succeeded",
  "command": [
    "true"
  ],
  "host": "vm",
  "createdAt": "2026-11-29T13:22:08.955796439Z",
  "startedAt": "2026-11-29T13:22:08.957894213Z",
  "finishedAt": null,
  "exitCode": 0,
  "reason": "a \u003cb\u003e \u0026 c"
}
`
	o, err := parseObject([]byte(rec))
	if err != nil {
		t.Fatal(err)
	}
	again, err := o.encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != rec {
		t.Fatalf("round trip changed the record:\n%s", again)
	}
	tp := &template{obj: o}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	b, err := tp.instance("r-20260102T030405.000000006Z-0123456789abcdef", "hist-1", at)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 1,
  "runId": "r-20260102T030405.000000006Z-0123456789abcdef",
  "task": "hist-1",
  "state": "succeeded",
  "command": [
    "true"
  ],
  "host": "vm",
  "createdAt": "2026-01-02T03:04:05.000000006Z",
  "startedAt": "2026-01-02T03:04:05.002000006Z",
  "finishedAt": null,
  "exitCode": 0,
  "reason": "a \u003cb\u003e \u0026 c"
}
`
	if string(b) != want {
		t.Fatalf("instance:\n%s\nwant:\n%s", b, want)
	}
	if _, err := (object{{key: "x", val: []byte("1")}}).with("runId", "r"); err == nil {
		t.Fatal("setting a field the template lacks must fail")
	}
}
