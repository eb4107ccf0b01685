package runstore

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/crew-dev/crew/internal/record"
)

// finalOf is rec made final, as its supervisor would.
func finalOf(rec *record.Run, state record.State, code int, reason string) *record.Run {
	rec.Finish(state, time.Date(2024, 1, 2, 3, 5, 0, 0, time.UTC), &code, reason)
	return rec
}

// reserveV1 makes a run as a crew of state-root version 1 left it: a
// JSON record, and an owner lock file with room for the outcome, whose
// locks this process holds.
func reserveV1(t *testing.T, s *Store, id record.RunID) *RunLocks {
	t.Helper()
	l := reserve(t, s, id)
	l.rf.close()
	l.rf = nil
	if err := os.Remove(s.ActivePath(id)); err != nil {
		t.Fatal(err)
	}
	mustWriteActive(t, s, testRecord(id, record.Running))
	if _, err := l.owner.File().WriteAt(outcomePlaceholder, 0); err != nil {
		t.Fatal(err)
	}
	return l
}

// A run of this crew keeps its outcome in its own record file: in place,
// in the slot allocated at reservation. Its owner lock file stays empty,
// so removing it frees no data block.
func TestKeepOutcomeInTheRunsOwnFile(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	if fi, err := os.Stat(s.osPath(ownersDir, ownerLockName(testID))); err != nil || fi.Size() != 0 {
		t.Fatalf("owner lock file after Reserve: %v, %v; want it empty", fi, err)
	}
	before, err := os.Stat(s.ActivePath(testID))
	if err != nil {
		t.Fatal(err)
	}
	rec := finalOf(testRecord(testID, record.Running), record.Stopped, 143, "crew received SIGTERM")
	if err := l.KeepOutcome(rec, errors.New("no space left on device")); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(s.ActivePath(testID))
	if err != nil || !os.SameFile(before, after) || after.Size() != before.Size() {
		t.Errorf("KeepOutcome did not write in place: %v, %v → %v", err, before, after)
	}
	if fi, _ := os.Stat(s.osPath(ownersDir, ownerLockName(testID))); fi.Size() != 0 {
		t.Errorf("the owner lock file holds %d bytes", fi.Size())
	}
	l.Release()
	got, err := s.ReadActive(testID)
	if err != nil || got.State != record.Stopped || *got.ExitCode != 143 {
		t.Fatalf("ReadActive = %+v, %v", got, err)
	}
	ents, err := s.ListActive()
	if err != nil || len(ents) != 1 || !ents[0].Finished {
		t.Fatalf("ListActive = %+v, %v; want a finished leftover", ents, err)
	}
}

// A run of an older crew: the room for the outcome in the owner lock
// file; an outcome kept there survives the supervisor and reads back
// under the run's fence, as recovery reads it.
func TestSaveOutcomeReadsBackUnderTheFence(t *testing.T) {
	s := newStore(t)
	l := reserveV1(t, s, testID)
	if o, err := l.Outcome(); o != nil || err != nil {
		t.Fatalf("Outcome() before any = %+v, %v", o, err)
	}
	rec := finalOf(testRecord(testID, record.Running), record.Stopped, 143, "crew received SIGTERM")
	rec.Signal = "SIGTERM"
	cause := errors.New("record run " + string(testID) + ": no space left on device")
	if err := l.KeepOutcome(rec, cause); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(s.osPath(ownersDir, ownerLockName(testID))); fi.Size() != outcomeSpace {
		t.Errorf("the outcome grew the file to %d bytes; it must fit the reserved %d", fi.Size(), outcomeSpace)
	}
	l.Release() // the supervisor dies

	fence, err := s.Fence(testID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fence.Release()
	o, err := fence.Outcome()
	if err != nil || o == nil {
		t.Fatalf("Outcome() under the fence = %+v, %v", o, err)
	}
	if o.RunID != testID || o.State != record.Stopped || o.ExitCode == nil || *o.ExitCode != 143 || o.Signal != "SIGTERM" ||
		o.Reason != "crew received SIGTERM" || !o.FinishedAt.Equal(*rec.FinishedAt) || o.SupervisorPID != 4711 || o.Cause != cause.Error() {
		t.Errorf("Outcome() = %+v", o)
	}
}

// However long the reason and the cause, the outcome fits the room.
func TestEncodeOutcomeFitsTheRoom(t *testing.T) {
	code := 1
	o := Outcome{RunID: testID, State: record.Failed, ExitCode: &code, FinishedAt: time.Now(),
		Reason: strings.Repeat("é", 3000), Cause: "/" + strings.Repeat("very/long/path/", 300) + ": no space left on device"}
	line, err := encodeOutcome(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(line) > outcomeSpace || !utf8.Valid(line) {
		t.Fatalf("encoded outcome is %d bytes (valid UTF-8: %v)", len(line), utf8.Valid(line))
	}
	got, err := decodeOutcome(line, testID)
	if err != nil || got == nil || got.State != record.Failed || *got.ExitCode != 1 {
		t.Fatalf("decode = %+v, %v", got, err)
	}
	if !strings.HasSuffix(got.Reason, "…") && !strings.HasSuffix(got.Cause, "…") {
		t.Errorf("nothing says the text was cut: %q / %q", got.Reason, got.Cause)
	}
}

func TestDecodeOutcome(t *testing.T) {
	good, err := encodeOutcome(Outcome{RunID: testID, State: record.Succeeded, FinishedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		data    string
		none    bool
		errText string
	}{
		"empty":                    {data: "", none: true},
		"placeholder":              {data: string(outcomePlaceholder), none: true},
		"written by the command":   {data: "hello from fd 3\n", none: true},
		"good, placeholder behind": {data: string(good) + string(outcomePlaceholder[len(good):])},
		"torn":                     {data: outcomeMagic + ` {"runId": "r-`, errText: "unreadable outcome"},
		"another run":              {data: strings.Replace(string(good), string(testID), "r-20240102T030405.000000006Z-ffffffffffffffff", 1), errText: "is for run r-20240102T030405.000000006Z-ffffffffffffffff"},
		"not an end":               {data: strings.Replace(string(good), `"succeeded"`, `"running"`, 1), errText: `says "running"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := decodeOutcome([]byte(c.data), testID)
			switch {
			case c.errText != "":
				if err == nil || !strings.Contains(err.Error(), c.errText) {
					t.Errorf("decode = %+v, %v; want an error saying %q", o, err, c.errText)
				}
			case c.none && (o != nil || err != nil):
				t.Errorf("decode = %+v, %v; want no outcome", o, err)
			case !c.none && (o == nil || err != nil):
				t.Errorf("decode = %+v, %v; want the outcome", o, err)
			}
		})
	}
}

// A non-final record has no outcome to keep.
func TestSaveOutcomeNeedsAFinalRecord(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	if err := l.KeepOutcome(testRecord(testID, record.Running), errors.New("x")); err == nil {
		t.Error("KeepOutcome(running) succeeded")
	}
}

// FinishAgain after a Finish that wrote the final record but could not
// take the run out of the active set: it does not write the record again.
func TestFinishAgainAfterTheRecordWasWritten(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	rec := finalOf(testRecord(testID, record.Running), record.Succeeded, 0, "")
	mustWriteDone(t, s, rec)
	path := s.osPath(shardDir(testID), recordName(testID))
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.FinishAgain(rec); err != nil {
		t.Fatal(err)
	}
	// A rewrite is a new file renamed into place: a new inode.
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) {
		t.Errorf("FinishAgain rewrote the final record (%v)", err)
	}
	assertMissing(t, s.ActivePath(testID))
	assertMissing(t, s.osPath(ownersDir, ownerLockName(testID)))
}

// outcomePlaceholder is what a crew of state-root version 1 wrote into
// an owner lock file at reservation, until an outcome was written over it.
var outcomePlaceholder = func() []byte {
	b := bytes.Repeat([]byte{' '}, outcomeSpace)
	copy(b, "crew: room reserved for this run's outcome, in case its record cannot be written\n")
	b[outcomeSpace-1] = '\n'
	return b
}()
