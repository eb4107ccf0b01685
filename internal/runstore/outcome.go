package runstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"

	"github.com/crew-dev/crew/internal/record"
)

// A run's outcome, kept in its owner lock file when the final record
// cannot be written (a full disk, a directory that turned unwritable):
// the supervisor knows how the command ended, and that must outlive it.
//
// The owner lock file is the one place that needs no new file, no new
// directory entry and no permission check when the disk is full: the
// supervisor holds it open read-write for the whole run. A crew of
// state-root version 1 wrote a placeholder of outcomeSpace bytes into it
// at reservation, so the blocks an outcome needs were allocated while
// there was room. This crew keeps a run's outcome in the run's own record
// file instead (its slots are allocated at reservation: runfile.go), so
// its owner lock files stay empty; it still writes an outcome here for a
// run an older crew reserved, and reads outcomes kept here by either.
//
// The file holds one line: outcomeMagic, a space, and the outcome as JSON.
// Anything else (the placeholder, an empty file) is "no outcome".

// outcomeSpace is the room a crew of version 1 reserved for an outcome,
// in bytes.
const outcomeSpace = 1024

const outcomeMagic = "crew-outcome-v1"

// Outcome is how a run ended, as its supervisor knew it, kept where
// recovery finds it when the final record could not be written.
type Outcome struct {
	RunID         record.RunID `json:"runId"`
	State         record.State `json:"state"`
	ExitCode      *int         `json:"exitCode"`
	Signal        string       `json:"signal,omitempty"`
	Reason        string       `json:"reason,omitempty"`
	FinishedAt    time.Time    `json:"finishedAt"`
	SupervisorPID int          `json:"supervisorPid"`
	// Cause is why the supervisor could not record it.
	Cause string `json:"cause"`
}

// encodeOutcome renders an outcome as the one line it is stored as,
// shortening its free text until it fits the reserved room.
func encodeOutcome(o Outcome) ([]byte, error) {
	for {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("encode the outcome of run %s: %w", o.RunID, err)
		}
		line := append(append([]byte(outcomeMagic+" "), b...), '\n')
		if len(line) <= outcomeSpace {
			return line, nil
		}
		if o.Cause == "" && o.Reason == "" {
			return nil, fmt.Errorf("the outcome of run %s does not fit in %d bytes", o.RunID, outcomeSpace)
		}
		if len(o.Cause) >= len(o.Reason) {
			o.Cause = shorten(o.Cause)
		} else {
			o.Reason = shorten(o.Reason)
		}
	}
}

// shorten halves s, on a rune boundary, and marks the cut; a short s
// goes altogether.
func shorten(s string) string {
	if len(s) < 16 {
		return ""
	}
	n := len(s) / 2
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// decodeOutcome reads the outcome line at the start of data, if any.
func decodeOutcome(data []byte, id record.RunID) (*Outcome, error) {
	line, _, _ := bytes.Cut(data, []byte{'\n'})
	rest, ok := bytes.CutPrefix(line, []byte(outcomeMagic+" "))
	if !ok {
		return nil, nil
	}
	var o Outcome
	if err := json.Unmarshal(rest, &o); err != nil {
		return nil, fmt.Errorf("unreadable outcome: %w", err)
	}
	switch {
	case o.RunID != id:
		return nil, fmt.Errorf("the outcome is for run %s, not %s", o.RunID, id)
	case o.State.Active() || o.State == "" || o.FinishedAt.IsZero():
		return nil, fmt.Errorf("the outcome says %q, which is not how a run ends", o.State)
	}
	return &o, nil
}

// KeepOutcome keeps the end of a run whose final record could not be
// written (cause) in its owner lock file, through the descriptor this
// process holds, and makes it durable. rec must be final.
func (l *RunLocks) KeepOutcome(rec *record.Run, cause error) error {
	if l.owner == nil || rec.RunID != l.id || rec.State.Active() || rec.FinishedAt == nil {
		return fmt.Errorf("run %s: no final outcome to keep", rec.RunID)
	}
	// A run with a slot file keeps its outcome there: its final record,
	// in the slot allocated at reservation (Finish may have made it
	// durable already; then nothing is written). It stays in the active
	// set, a finished leftover that the next finalizer moves.
	switch rf, dir, err := l.runFile(rec); {
	case err != nil:
		return fmt.Errorf("keep the outcome of run %s: %w", l.id, err)
	case rf != nil:
		if err := l.s.keepInRunFile(dir, rf, rec); err != nil {
			return fmt.Errorf("keep the outcome of run %s in %s: %w", l.id, l.s.ActivePath(l.id), unwrapPath(err))
		}
		return nil
	}
	line, err := encodeOutcome(Outcome{RunID: rec.RunID, State: rec.State, ExitCode: rec.ExitCode, Signal: rec.Signal,
		Reason: rec.Reason, FinishedAt: *rec.FinishedAt, SupervisorPID: rec.SupervisorPID, Cause: cause.Error()})
	if err != nil {
		return err
	}
	f := l.owner.File()
	if f == nil {
		return fmt.Errorf("run %s: only its supervisor keeps its outcome", l.id)
	}
	if _, err := f.WriteAt(line, 0); err != nil {
		return fmt.Errorf("keep the outcome of run %s in %s: %w", l.id, l.OutcomePath(), bareErr(err))
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("keep the outcome of run %s in %s: fsync: %w", l.id, l.OutcomePath(), bareErr(err))
	}
	// The lock file's own entry has never been synced; make it durable too.
	if dir, err := l.s.layout(ownersDir); err == nil {
		_ = syncDir(dir)
	}
	return nil
}

// Outcome reads an outcome kept in the run's owner lock file; nil if none.
func (l *RunLocks) Outcome() (*Outcome, error) {
	if l.owner == nil {
		return nil, nil
	}
	buf := make([]byte, 2*outcomeSpace) // bounded: the file is the command's too
	n, err := l.owner.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read the outcome of run %s in %s: %w", l.id, l.OutcomePath(), bareErr(err))
	}
	o, err := decodeOutcome(buf[:n], l.id)
	if err != nil {
		return nil, fmt.Errorf("owner lock file %s: %w", l.OutcomePath(), err)
	}
	return o, nil
}

// OutcomePath is where KeepOutcome keeps the run's outcome, for
// messages: the run's own record file in the active set; for a run an
// older crew reserved, its owner lock file.
func (l *RunLocks) OutcomePath() string {
	if rf, _, err := l.runFile(nil); err == nil && rf != nil {
		return l.s.display(activeDir, recordName(l.id))
	}
	return l.s.display(ownersDir, ownerLockName(l.id))
}

// FinishAgain is Finish for a retry after Finish failed: a final record
// that an earlier attempt already made durable is not written again (on
// the full disk that failed the attempt, the rewrite could fail too).
func (l *RunLocks) FinishAgain(rec *record.Run) error {
	if rec.RunID != l.id {
		return fmt.Errorf("finish run %s with the locks of run %s", rec.RunID, l.id)
	}
	if !l.s.IsDone(rec.RunID) {
		return l.Finish(rec)
	}
	if err := l.s.indexAndLeave(rec); err != nil {
		return err
	}
	return l.released(l.removeAndRelease())
}

// bareErr is the error of a failed operation on an open file without the
// file's (relative) name, for messages that name the file in full.
func bareErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
