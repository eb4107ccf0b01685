package record

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestAttemptsRoundTrip: a run with a timeout, retries and attempts
// survives Encode and DecodeRun, with its durations stored as crew writes
// durations elsewhere.
func TestAttemptsRoundTrip(t *testing.T) {
	r := testRecord(testID, Failed)
	r.Timeout, r.Retries, r.RetryDelay, r.TimedOut = Duration(90*time.Second), 2, Duration(1500*time.Millisecond), true
	end, code := r.CreatedAt.Add(time.Second), 124
	r.Attempts = []Attempt{{Number: 1, StartedAt: r.CreatedAt, PID: 7, EndedAt: &end, ExitCode: &code, Signal: "SIGTERM", TimedOut: true, Reason: "timed out"}}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"timeout": "1m30s"`, `"retryDelay": "1.5s"`, `"retries": 2`, `"timedOut": true`, `"attempt": 1`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("encoded record lacks %s:\n%s", want, b)
		}
	}
	got, err := DecodeRun(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip changed the record:\n got %+v\nwant %+v", got, r)
	}
	if got.MaxAttempts() != 3 || got.Attempt().Number != 1 {
		t.Errorf("MaxAttempts %d, latest attempt %+v", got.MaxAttempts(), got.Attempt())
	}
}

// TestRecordWithoutRetriesIsUnchanged: a run started without --timeout or
// --retries stores none of their fields, so its record is what older
// crews wrote and read, and an older record reads as one without them.
func TestRecordWithoutRetriesIsUnchanged(t *testing.T) {
	b, err := testRecord(testID, Succeeded).Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"timeout", "retries", "retryDelay", "timedOut", "attempts"} {
		if bytes.Contains(b, []byte(`"`+k+`"`)) {
			t.Errorf("a run without retries stores %q:\n%s", k, b)
		}
	}
	got, err := DecodeRun(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Timeout != 0 || got.Retries != 0 || got.Attempt() != nil || got.MaxAttempts() != 1 {
		t.Errorf("decoded %+v", got)
	}
}

// TestDecodeRunBadTimeout: a stored timeout that is not a duration makes
// the record unreadable, with a message that says why.
func TestDecodeRunBadTimeout(t *testing.T) {
	for _, v := range []any{"soon", 5} {
		b := recordJSON(t, testRecord(testID, Running), func(m map[string]any) { m["timeout"] = v })
		_, err := DecodeRun(b)
		if err == nil || !strings.Contains(err.Error(), "malformed run record") {
			t.Errorf("timeout %v: err = %v", v, err)
		}
	}
}
