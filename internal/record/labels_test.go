package record

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseLabel(t *testing.T) {
	for _, c := range []struct{ in, key, value string }{
		{"pipeline=1234", "pipeline", "1234"},
		{"ci.job/name=unit tests", "ci.job/name", "unit tests"},
		{"url=https://x.example/?a=b", "url", "https://x.example/?a=b"}, // the first "=" splits
		{"caf\u00e9=\u65e5\u672c", "caf\u00e9", "\u65e5\u672c"},
	} {
		k, v, err := ParseLabel(c.in)
		if err != nil || k != c.key || v != c.value {
			t.Errorf("ParseLabel(%q) = %q, %q, %v; want %q, %q", c.in, k, v, err, c.key, c.value)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"pipeline", `label "pipeline" has no "=": give KEY=VALUE`},
		{"=1", "label key is empty"},
		{"pipeline=", "label pipeline has an empty value: give KEY=VALUE (an unset variable in --label pipeline=$VAR?)"},
		{"two words=1", `label key "two words" has a space or "="`},
		{strings.Repeat("k", 65) + "=1", "label key is 65 bytes long; the limit is 64"},
		{"k=" + strings.Repeat("v", 257), "label k's value is 257 bytes long; the limit is 256"},
		{"k=a\nb", "label value \"a\\nb\" has a character that does not print (U+000A)"},
		{"k\u202e=1", `label key "k\u202e" has a character that does not print (U+202E)`},
		{"k=\xff", "is not valid UTF-8"},
	} {
		_, _, err := ParseLabel(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseLabel(%q) = %v; want an error with %q", c.in, err, c.want)
		}
	}
}

func TestLabelsHas(t *testing.T) {
	l := Labels{"pipeline": "7", "stage": "test"}
	for _, c := range []struct {
		want Labels
		has  bool
	}{
		{nil, true},
		{Labels{"pipeline": "7"}, true},
		{Labels{"pipeline": "7", "stage": "test"}, true},
		{Labels{"pipeline": "8"}, false},
		{Labels{"pipeline": "7", "stage": "build"}, false},
		{Labels{"other": "7"}, false},
	} {
		if got := l.Has(c.want); got != c.has {
			t.Errorf("%v.Has(%v) = %v", l, c.want, got)
		}
	}
	if got := Labels(nil).Has(Labels{"a": "1"}); got {
		t.Error("a run without labels has none")
	}
	if got := l.String(); got != "pipeline=7,stage=test" {
		t.Errorf("String() = %q", got)
	}
}

// Labels round-trip through a record; a record of an older crew, without
// them, still decodes; stored labels that crew would refuse make the
// record unreadable rather than shown as they are.
func TestRecordLabels(t *testing.T) {
	r := testRecord(testID, Succeeded)
	r.Labels = Labels{"pipeline": "1234", "stage": "unit"}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\"labels\": {\n    \"pipeline\": \"1234\",\n    \"stage\": \"unit\"\n  },") {
		t.Errorf("labels not stored as an object:\n%s", b)
	}
	got, err := DecodeRun(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Labels, r.Labels) {
		t.Errorf("labels %v after a round trip, want %v", got.Labels, r.Labels)
	}

	old := recordJSON(t, testRecord(testID, Succeeded), func(m map[string]any) { delete(m, "labels") })
	if rec, err := DecodeRun(old); err != nil || rec.Labels != nil {
		t.Errorf("a record without labels: %v, %v", rec, err)
	}

	bad := recordJSON(t, r, func(m map[string]any) { m["labels"] = map[string]any{"a=b": "1"} })
	if _, err := DecodeRun(bad); err == nil || !strings.Contains(err.Error(), `bad labels: label key "a=b" has a space or "="`) {
		t.Errorf("a record with a bad label key: %v", err)
	}
}
