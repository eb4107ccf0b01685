package record

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/crew-dev/crew/internal/duration"
)

// A run record is encoded by hand, field by field in the order and with
// the omissions of its struct tags, indented as it goes: the bytes are
// exactly json.MarshalIndent(r, "", "  ")'s (TestEncodeIsMarshalIndent and
// the fuzz targets hold it to that), without reflection. encoding/json
// builds its encoder for a type on first use, by reflection over every
// field; in a crew start, a fresh process that writes three records, that
// first use was 0.2-0.3 ms, 5 % of the whole start. Decoding stays with
// encoding/json.

// jsonWriter appends JSON indented by two spaces a level, as
// json.MarshalIndent does; err is the first error (a time that JSON cannot
// hold).
type jsonWriter struct {
	b     []byte
	depth int
	first bool // no member or element yet in the innermost object or array
	err   error
}

func (w *jsonWriter) open(c byte) {
	w.b = append(w.b, c)
	w.depth++
	w.first = true
}

// close ends an object or array: on a line of its own unless it is empty
// ("[]", as encoding/json writes an empty array).
func (w *jsonWriter) close(c byte) {
	w.depth--
	if !w.first {
		w.newline()
	}
	w.b = append(w.b, c)
	w.first = false
}

func (w *jsonWriter) newline() {
	w.b = append(w.b, '\n')
	for range w.depth {
		w.b = append(w.b, ' ', ' ')
	}
}

// sep comes before each member of an object and each element of an array.
func (w *jsonWriter) sep() {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.newline()
	w.first = false
}

// key starts a member: its separator, name and colon. Names are crew's
// own ASCII identifiers, which need no escaping.
func (w *jsonWriter) key(name string) {
	w.sep()
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':', ' ')
}

func (w *jsonWriter) str(k, v string) {
	w.key(k)
	w.b = appendJSONString(w.b, v)
}

func (w *jsonWriter) int(k string, v int64) {
	w.key(k)
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *jsonWriter) uint(k string, v uint64) {
	w.key(k)
	w.b = strconv.AppendUint(w.b, v, 10)
}

func (w *jsonWriter) bool(k string, v bool) {
	w.key(k)
	w.b = strconv.AppendBool(w.b, v)
}

func (w *jsonWriter) null(k string) {
	w.key(k)
	w.b = append(w.b, "null"...)
}

// time is time.Time's own JSON: RFC 3339 with nanoseconds, and its error
// for a year outside 0-9999 or an offset JSON cannot express.
func (w *jsonWriter) time(k string, t time.Time) {
	w.key(k)
	w.b = append(w.b, '"')
	b, err := t.AppendText(w.b)
	if err != nil {
		if w.err == nil {
			w.err = fmt.Errorf("json: error calling MarshalJSON for type time.Time: %w", err)
		}
		return
	}
	w.b = append(b, '"')
}

func (w *jsonWriter) timePtr(k string, t *time.Time, omitEmpty bool) {
	switch {
	case t != nil:
		w.time(k, *t)
	case !omitEmpty:
		w.null(k)
	}
}

func (w *jsonWriter) intPtr(k string, v *int, omitEmpty bool) {
	switch {
	case v != nil:
		w.int(k, int64(*v))
	case !omitEmpty:
		w.null(k)
	}
}

func (w *jsonWriter) strings(k string, v []string) {
	if v == nil {
		w.null(k)
		return
	}
	w.key(k)
	w.open('[')
	for _, s := range v {
		w.sep()
		w.b = appendJSONString(w.b, s)
	}
	w.close(']')
}

// labels is a map's JSON as encoding/json writes it: keys sorted,
// escaped like any string.
func (w *jsonWriter) labels(k string, l Labels) {
	w.key(k)
	w.open('{')
	for _, name := range l.Keys() {
		w.sep()
		w.b = appendJSONString(w.b, name)
		w.b = append(w.b, ':', ' ')
		w.b = appendJSONString(w.b, l[name])
	}
	w.close('}')
}

func (w *jsonWriter) fileID(k string, id FileID) {
	w.key(k)
	w.open('{')
	w.uint("dev", id.Dev)
	w.uint("ino", id.Ino)
	w.close('}')
}

// appendJSON is the run's JSON, member by member as its struct
// tags say (omitempty included), in the struct's order: what ran and how
// it ended, its processes and its admission, its retries.
func (r *Run) appendJSON(w *jsonWriter) {
	w.open('{')
	r.appendCommand(w)
	r.appendAdmission(w)
	r.appendRetries(w)
	w.close('}')
}

// appendCommand is the members from version to reason: which run of
// which command, where, and how it ended.
func (r *Run) appendCommand(w *jsonWriter) {
	w.int("version", int64(r.Version))
	w.str("runId", string(r.RunID))
	w.str("task", r.Task)
	w.str("state", string(r.State))
	w.strings("command", r.Command)
	if r.Dir != "" {
		w.str("dir", r.Dir)
	}
	if len(r.Labels) > 0 {
		w.labels("labels", r.Labels)
	}
	w.str("host", r.Host)
	w.time("createdAt", r.CreatedAt)
	w.timePtr("startedAt", r.StartedAt, false)
	w.timePtr("finishedAt", r.FinishedAt, false)
	w.intPtr("exitCode", r.ExitCode, false)
	if r.Signal != "" {
		w.str("signal", r.Signal)
	}
	w.str("reason", r.Reason)
}

// appendAdmission is the members from supervisorPid to
// maximumInProgressAtAdmission: the run's processes, how it was admitted,
// its events and its lock files.
func (r *Run) appendAdmission(w *jsonWriter) {
	w.int("supervisorPid", int64(r.SupervisorPID))
	w.int("taskPid", int64(r.TaskPID))
	w.int("pgid", int64(r.PGID))
	w.bool("forced", r.Forced)
	w.str("pool", r.Pool)
	if r.LogMax != 0 {
		w.int("logMax", r.LogMax)
	}
	if r.Parent != "" {
		w.str("parentRunId", string(r.Parent))
	}
	w.timePtr("queuedAt", r.QueuedAt, true)
	if r.NeverAdmitted {
		w.bool("neverAdmitted", true)
	}
	if r.Events == nil {
		w.null("events")
	} else {
		w.key("events")
		w.open('[')
		for _, e := range r.Events {
			w.sep()
			w.open('{')
			w.time("at", e.At)
			w.str("what", e.What)
			w.close('}')
		}
		w.close(']')
	}
	if r.Locks != nil {
		w.key("locks")
		w.open('{')
		w.fileID("owner", r.Locks.Owner)
		w.fileID("supervisor", r.Locks.Supervisor)
		w.close('}')
	}
	w.int("slotsInUseAtAdmission", int64(r.SlotsInUse))
	w.int("maximumInProgressAtAdmission", int64(r.MaximumInProgress))
}

// appendRetries is the members from timeout on: the run's time limit and
// retries, its attempts, and how its command ended while processes it
// left still held the slot.
func (r *Run) appendRetries(w *jsonWriter) {
	if r.Timeout != 0 {
		w.str("timeout", duration.Format(time.Duration(r.Timeout)))
	}
	if r.Retries != 0 {
		w.int("retries", int64(r.Retries))
	}
	if r.RetryDelay != 0 {
		w.str("retryDelay", duration.Format(time.Duration(r.RetryDelay)))
	}
	if r.TimedOut {
		w.bool("timedOut", true)
	}
	if len(r.Attempts) > 0 {
		w.key("attempts")
		w.open('[')
		for i := range r.Attempts {
			w.sep()
			r.Attempts[i].appendJSON(w)
		}
		w.close(']')
	}
	if c := r.CommandEnded; c != nil {
		w.key("commandEnded")
		c.appendJSON(w)
	}
}

func (c *CommandEnd) appendJSON(w *jsonWriter) {
	w.open('{')
	w.time("at", c.At)
	w.str("state", string(c.State))
	w.intPtr("exitCode", c.ExitCode, false)
	if c.Signal != "" {
		w.str("signal", c.Signal)
	}
	if c.TimedOut {
		w.bool("timedOut", true)
	}
	if c.Reason != "" {
		w.str("reason", c.Reason)
	}
	if len(c.PIDs) > 0 {
		w.key("pids")
		w.open('[')
		for _, p := range c.PIDs {
			w.sep()
			w.b = strconv.AppendInt(w.b, int64(p), 10)
		}
		w.close(']')
	}
	w.close('}')
}

func (a *Attempt) appendJSON(w *jsonWriter) {
	w.open('{')
	w.int("attempt", int64(a.Number))
	w.time("startedAt", a.StartedAt)
	w.int("pid", int64(a.PID))
	w.timePtr("finishedAt", a.EndedAt, true)
	w.intPtr("exitCode", a.ExitCode, true)
	if a.Signal != "" {
		w.str("signal", a.Signal)
	}
	if a.TimedOut {
		w.bool("timedOut", true)
	}
	if a.Reason != "" {
		w.str("reason", a.Reason)
	}
	w.close('}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as encoding/json
// writes one: <, > and & escaped for HTML, the control characters as \b,
// \f, \n, \r, \t or \u00XX, invalid UTF-8 as \ufffd, and U+2028 and U+2029
// escaped. encoding/json has no exported function for it.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
