package record

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testID RunID = "r-20240102T030405.000000006Z-0123456789abcdef"

func testRecord(id RunID, state State) *Run {
	created, err := id.CreatedAt()
	if err != nil {
		panic(err)
	}
	r := &Run{
		Version:           RecordVersion,
		RunID:             id,
		Task:              "nightly-backup",
		State:             state,
		Command:           []string{"make", "backup"},
		Dir:               "/srv",
		Host:              "ci-7",
		CreatedAt:         created,
		SupervisorPID:     4711,
		SlotsInUse:        1,
		MaximumInProgress: 4,
	}
	if state != Provisioning {
		started := created.Add(time.Second)
		r.StartedAt = &started
		r.TaskPID = 4712
		r.PGID = 4712
	}
	if !state.Active() {
		finished := created.Add(time.Minute)
		code := 0
		r.FinishedAt = &finished
		r.ExitCode = &code
		r.Reason = "exited"
	}
	return r
}

// recordJSON renders a record as a generic map so a test can break one
// field at a time.
func recordJSON(t testing.TB, r *Run, edit func(m map[string]any)) []byte {
	t.Helper()
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStateActive(t *testing.T) {
	want := map[State]bool{
		Provisioning: true, Running: true,
		Succeeded: false, Failed: false, Stopped: false, Interrupted: false,
		"": false, "RUNNING": false, "bogus": false,
	}
	for s, active := range want {
		if s.Active() != active {
			t.Errorf("%q.Active() = %v, want %v", s, s.Active(), active)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	states := []State{Provisioning, Running, Succeeded, Failed, Stopped, Interrupted}
	for _, st := range states {
		t.Run(string(st), func(t *testing.T) {
			r := testRecord(testID, st)
			r.Forced = true
			r.Signal = "SIGTERM"
			r.Task = "déploiement: PR-12/tests"
			b, err := r.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(b, []byte("}\n")) {
				t.Errorf("encoding does not end in a newline: %q", b[len(b)-3:])
			}
			got, err := DecodeRun(b)
			if err != nil {
				t.Fatalf("DecodeRun(Encode()) = %v\n%s", err, b)
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("round trip changed the record:\n got %+v\nwant %+v", got, r)
			}
			b2, err := got.Encode()
			if err != nil || !bytes.Equal(b, b2) {
				t.Errorf("re-encoding differs (err %v):\n%s\n%s", err, b, b2)
			}
		})
	}
}

func TestRecordEncodingFieldNames(t *testing.T) {
	// The stored schema is versioned; its field names are part of it.
	b, err := testRecord(testID, Failed).Encode()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "runId", "task", "state", "command", "host", "createdAt",
		"startedAt", "finishedAt", "exitCode", "reason", "supervisorPid", "taskPid", "pgid", "forced",
		"slotsInUseAtAdmission", "maximumInProgressAtAdmission"} {
		if _, ok := m[k]; !ok {
			t.Errorf("encoded record lacks %q: %s", k, b)
		}
	}
	if string(m["version"]) != "1" {
		t.Errorf("version = %s, want 1", m["version"])
	}
}

func TestDecodeRunToleratesAddedFields(t *testing.T) {
	// "Fields may be added within a version": a newer crew's extra field
	// does not make the record unreadable.
	b := recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["someFutureField"] = 42 })
	if _, err := DecodeRun(b); err != nil {
		t.Fatalf("DecodeRun with an added field = %v", err)
	}
}

func TestDecodeRunErrors(t *testing.T) {
	valid := recordJSON(t, testRecord(testID, Succeeded), nil)
	tests := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"nil", nil, "empty"},
		{"empty", []byte{}, "empty"},
		{"whitespace", []byte("  \n"), "not a JSON run record"},
		{"truncated", valid[:len(valid)/2], "not a JSON run record"},
		{"truncated by one byte", valid[:len(valid)-1], "not a JSON run record"},
		{"not JSON", []byte("hello, world"), "not a JSON run record"},
		{"NUL bytes", make([]byte, 64), "not a JSON run record"},
		{"JSON array", []byte(`[1,2,3]`), "not a JSON run record"},
		{"JSON string", []byte(`"version"`), "not a JSON run record"},
		{"JSON null", []byte(`null`), "no \"version\""},
		{"trailing garbage", append(append([]byte{}, valid...), []byte("xyz")...), "not a JSON run record"},
		{"two objects", append(append([]byte{}, valid...), valid...), "not a JSON run record"},
		{"missing version", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { delete(m, "version") }), "no \"version\""},
		{"null version", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["version"] = nil }), "no \"version\""},
		{"version 0", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["version"] = 0 }), "unknown record version 0"},
		{"version 2", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["version"] = 2 }), "unknown record version 2"},
		{"version string", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["version"] = "1" }), "not a JSON run record"},
		{"version float", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["version"] = 1.5 }), "not a JSON run record"},
		{"empty object", []byte(`{}`), "no \"version\""},
		{"only version", []byte(`{"version":1}`), "bad runId"},
		{"bad runId", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["runId"] = "run-1" }), "bad runId"},
		{"runId path", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["runId"] = "../" + string(testID) }), "bad runId"},
		{"missing runId", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { delete(m, "runId") }), "bad runId"},
		{"runId number", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["runId"] = 7 }), "malformed run record"},
		{"empty task", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["task"] = "" }), "bad task"},
		{"control char task", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["task"] = "a\nb" }), "bad task"},
		{"long task", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["task"] = strings.Repeat("x", 201) }), "bad task"},
		{"bad state", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["state"] = "sleeping" }), "unknown state \"sleeping\""},
		{"empty state", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["state"] = "" }), "unknown state"},
		{"state case", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["state"] = "Running" }), "unknown state"},
		{"succeeded without finishedAt", recordJSON(t, testRecord(testID, Succeeded), func(m map[string]any) { m["finishedAt"] = nil }), "without finishedAt"},
		{"failed without finishedAt", recordJSON(t, testRecord(testID, Failed), func(m map[string]any) { delete(m, "finishedAt") }), "without finishedAt"},
		{"stopped without finishedAt", recordJSON(t, testRecord(testID, Stopped), func(m map[string]any) { delete(m, "finishedAt") }), "without finishedAt"},
		{"interrupted without finishedAt", recordJSON(t, testRecord(testID, Interrupted), func(m map[string]any) { delete(m, "finishedAt") }), "without finishedAt"},
		{"bad createdAt", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["createdAt"] = "yesterday" }), "malformed run record"},
		{"bad exitCode", recordJSON(t, testRecord(testID, Failed), func(m map[string]any) { m["exitCode"] = "one" }), "malformed run record"},
		{"exitCode overflow", recordJSON(t, testRecord(testID, Failed), func(m map[string]any) { m["exitCode"] = 1e30 }), "malformed run record"},
		{"command not a list", recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["command"] = "make" }), "malformed run record"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rec *Run
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("DecodeRun panicked: %v", p)
					}
				}()
				rec, err = DecodeRun(tc.data)
			}()
			if err == nil {
				t.Fatalf("DecodeRun(%q) = %+v, want an error containing %q", tc.data, rec, tc.wantErr)
			}
			if rec != nil {
				t.Errorf("DecodeRun returned a record with its error: %+v", rec)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("DecodeRun error %q, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeRunActiveWithoutFinishedAt(t *testing.T) {
	for _, st := range []State{Provisioning, Running} {
		b := recordJSON(t, testRecord(testID, st), func(m map[string]any) { delete(m, "finishedAt") })
		if _, err := DecodeRun(b); err != nil {
			t.Errorf("%s record without finishedAt: %v", st, err)
		}
	}
}
