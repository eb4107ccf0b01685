package runstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"
)

// RunID names one run. It sorts by creation time (fixed-width UTC
// timestamp to the nanosecond), is unique (64 random bits, and the owner
// lock file is created with O_EXCL), and is safe as a file name.
type RunID string

const runIDTime = "20060102T150405.000000000Z"

var runIDPattern = regexp.MustCompile(`^r-\d{8}T\d{6}\.\d{9}Z-[0-9a-f]{16}$`)

// NewRunID makes a run id for a run created at now.
func NewRunID(now time.Time) RunID {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // never happens on Linux/macOS
	}
	return RunID("r-" + now.UTC().Format(runIDTime) + "-" + hex.EncodeToString(b[:]))
}

// ParseRunID validates s as a run id.
func ParseRunID(s string) (RunID, error) {
	if !runIDPattern.MatchString(s) {
		return "", fmt.Errorf("%q is not a run id (expected r-YYYYMMDDTHHMMSS.NNNNNNNNNZ-<16 hex digits>)", s)
	}
	if _, err := RunID(s).CreatedAt(); err != nil {
		return "", fmt.Errorf("%q is not a run id: %w", s, err)
	}
	return RunID(s), nil
}

// LooksLikeRunID reports whether s is a valid run id.
func LooksLikeRunID(s string) bool {
	_, err := ParseRunID(s)
	return err == nil
}

// Shard is the creation hour (UTC) as YYYY-MM-DDTHH: the directory of
// runs/done the finished run lives in. Hours, not days, so that listing
// the newest shard (what status does) stays small even at thousands of
// runs an hour; the names sort in time order.
func (id RunID) Shard() string {
	s := string(id)
	if len(s) < 13 {
		return "unknown"
	}
	return s[2:6] + "-" + s[6:8] + "-" + s[8:10] + "T" + s[11:13]
}

// CreatedAt is the creation time encoded in the id.
func (id RunID) CreatedAt() (time.Time, error) {
	s := string(id)
	if len(s) < 2+len(runIDTime) {
		return time.Time{}, fmt.Errorf("run id %q too short", s)
	}
	return time.Parse(runIDTime, s[2:2+len(runIDTime)])
}

// NewRunIDAfter makes a run id for now that sorts after prev, even if the
// clock stepped back: queue order is arrival order only if ids increase.
func NewRunIDAfter(prev RunID, now time.Time) RunID {
	if t, err := prev.CreatedAt(); err == nil && !now.After(t) {
		now = t.Add(time.Nanosecond)
	}
	return NewRunID(now)
}
