package runstore

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// The active index, runs/active.index, lets admission count a large active
// set without reading and decoding every record. It holds, for each run
// reserved, what admission needs and what never changes once the run is
// reserved (task, pool, creation time, supervisor pid, lock files): one
// line per reservation, appended inside the admission lock:
//
//	<run-id> <created-unix-ns> <pid> <owner dev:ino> <supervisor dev:ino> <task> <pool>
//
// separated by single spaces, with task and pool Go-quoted (so no name can
// add a field or a line). Not JSON: admission reads every line, and this
// parses ten times faster.
//
// It is a cache, never a source of truth. An entry is used only for a run
// whose record is in the active set and whose owner and supervisor locks
// the kernel shows held (anything else is read from its record as always);
// a missing, torn or foreign index costs only speed. Appends are not
// fsynced (its rewrites are atomic, through renameio): a
// line lost in a crash means that run's record is read instead. Lines of
// runs that left the active set are dropped when admission rewrites it.

const (
	indexDir = "runs"
	// activeIndexName is the index file in runs/.
	activeIndexName = "active.index"
	// maxActiveIndexBytes bounds the index; a larger one is not read.
	maxActiveIndexBytes = 8 << 20
	// compactAbove: admission rewrites the index once it holds this many
	// more lines than the active set has runs.
	compactAbove = 256
)

// activeEntryLine is one line of the active index.
type activeEntryLine struct {
	ID        record.RunID
	Task      string
	Pool      string
	CreatedAt time.Time
	PID       int
	Locks     record.LockIDs
}

func (e *activeEntryLine) line() []byte {
	b := make([]byte, 0, 160)
	b = append(b, e.ID...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.CreatedAt.UnixNano(), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(e.PID), 10)
	for _, f := range []record.FileID{e.Locks.Owner, e.Locks.Supervisor} {
		b = append(b, ' ')
		b = strconv.AppendUint(b, f.Dev, 10)
		b = append(b, ':')
		b = strconv.AppendUint(b, f.Ino, 10)
	}
	b = append(b, ' ')
	b = strconv.AppendQuote(b, e.Task)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, e.Pool)
	return append(b, '\n')
}

// parseIndexLine parses one line; ok is false for anything malformed.
func parseIndexLine(line string) (e activeEntryLine, ok bool) {
	id, rest := cutByte(line, ' ')
	created, rest := cutByte(rest, ' ')
	pid, rest := cutByte(rest, ' ')
	owner, rest := cutByte(rest, ' ')
	sup, rest := cutByte(rest, ' ')
	task, rest, err1 := unquotePrefix(rest)
	pool, rest, err2 := unquotePrefix(strings.TrimPrefix(rest, " "))
	ns, err3 := strconv.ParseInt(created, 10, 64)
	p, err4 := strconv.Atoi(pid)
	o, ok1 := parseFileID(owner)
	su, ok2 := parseFileID(sup)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !ok1 || !ok2 || rest != "" || !record.LooksLikeRunID(id) {
		return activeEntryLine{}, false
	}
	return activeEntryLine{ID: record.RunID(id), Task: task, Pool: pool, CreatedAt: time.Unix(0, ns).UTC(), PID: p,
		Locks: record.LockIDs{Owner: o, Supervisor: su}}, true
}

// unquotePrefix unquotes the Go-quoted string at the start of s.
func unquotePrefix(s string) (string, string, error) {
	// What strconv.Unquote does first, without finding the end twice: a
	// quoted string with no backslash or newline in it and valid UTF-8
	// inside is itself, unquoted. Almost every task and pool name is.
	if len(s) > 0 && s[0] == '"' {
		if end := strings.IndexByte(s[1:], '"'); end >= 0 {
			body := s[1 : 1+end]
			if strings.IndexByte(body, '\\') < 0 && strings.IndexByte(body, '\n') < 0 && utf8.ValidString(body) {
				return body, s[end+2:], nil
			}
		}
	}
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	u, err := strconv.Unquote(q)
	return u, s[len(q):], err
}

// cutByte is strings.Cut with a one-byte separator, straight to
// IndexByte: strings.Cut's general search first was an eighth of the time
// readIndex spent on a line.
func cutByte(s string, sep byte) (before, after string) {
	if i := strings.IndexByte(s, sep); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func parseFileID(s string) (record.FileID, bool) {
	dev, ino := cutByte(s, ':')
	d, err1 := strconv.ParseUint(dev, 10, 64)
	i, err2 := strconv.ParseUint(ino, 10, 64)
	return record.FileID{Dev: d, Ino: i}, err1 == nil && err2 == nil
}

// run is the part of a record the entry stands for: an active run.
func (e *activeEntryLine) run() record.Run {
	return record.Run{Version: record.RecordVersion, RunID: e.ID, Task: e.Task, Pool: e.Pool, State: record.Running,
		CreatedAt: e.CreatedAt, SupervisorPID: e.PID, Locks: &e.Locks}
}

// appendIndex records a reservation in the active index. Failing costs only
// speed, so it is not an error.
func (s records) appendIndex(rec *record.Run) {
	if rec.Locks == nil {
		return
	}
	e := activeEntryLine{ID: rec.RunID, Task: rec.Task, Pool: rec.Pool, CreatedAt: rec.CreatedAt, PID: rec.SupervisorPID, Locks: *rec.Locks}
	dir, err := s.layout(indexDir)
	if err != nil {
		return
	}
	f, err := rootfs.Open(dir, activeIndexName, os.O_WRONLY|os.O_APPEND|os.O_CREATE, s.filePerm())
	if err != nil {
		return
	}
	_, _ = f.Write(e.line())
	_ = f.Close()
}

// readIndex reads the active index into a map by run id, and counts its
// lines. Unreadable lines are skipped: a run without an entry is read from
// its record.
func (s records) readIndex() (map[record.RunID]*activeEntryLine, int) {
	dir, err := s.layout(indexDir)
	if err != nil {
		return nil, 0
	}
	data, err := rootfs.ReadFile(dir, activeIndexName, maxActiveIndexBytes)
	if err != nil {
		return nil, 0
	}
	// One string for the whole file: every entry's id, task and pool are
	// substrings of it, not allocations of their own. And one slice for
	// the entries, with room for every line, so that the map's pointers
	// are not an allocation each either.
	text := string(data)
	n := strings.Count(text, "\n") + 1
	entries := make([]activeEntryLine, 0, n)
	out := make(map[record.RunID]*activeEntryLine, n)
	lines := 0
	for text != "" {
		var line string
		line, text = cutByte(text, '\n')
		if line == "" {
			continue
		}
		lines++
		if e, ok := parseIndexLine(line); ok {
			entries = append(entries, e)
			out[e.ID] = &entries[len(entries)-1]
		}
	}
	return out, lines
}

// compactIndex rewrites the active index with the entries of the runs
// still in the active set. The caller holds the admission lock (only
// Reserve appends, under the same lock, so no line is lost to the
// rewrite).
func (a *Admission) compactIndex(index map[record.RunID]*activeEntryLine, active []record.RunID) {
	var buf bytes.Buffer
	for _, id := range active {
		if e, ok := index[id]; ok {
			buf.Write(e.line())
		}
	}
	dir, err := a.s.layout(indexDir)
	if err != nil {
		return
	}
	_ = writeFileMode(dir, activeIndexName, buf.Bytes(), atomic, a.s.filePerm())
}
