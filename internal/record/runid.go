package record

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"
)

// RunID names one run. It sorts by creation time (fixed-width UTC
// timestamp to the nanosecond), is unique (64 random bits, and the owner
// lock file is created with O_EXCL), and is safe as a file name.
type RunID string

const (
	runIDTime   = "20060102T150405.000000000Z"
	runIDPrefix = "r-"
	// RunIDLen is the length of every run id.
	RunIDLen = len(runIDPrefix) + len(runIDTime) + 1 + 16
)

// NewRunID makes a run id for a run created at now.
func NewRunID(now time.Time) RunID {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return RunID(runIDPrefix + now.UTC().Format(runIDTime) + "-" + hex.EncodeToString(b[:]))
}

// ParseRunID validates s as a run id.
func ParseRunID(s string) (RunID, error) {
	if !wellFormed(s) {
		return "", fmt.Errorf("%q is not a run id (expected r-YYYYMMDDTHHMMSS.NNNNNNNNNZ-<16 hex digits>)", s)
	}
	if !realTime(s) {
		// time.Parse says what is wrong; realTime only says whether.
		_, err := RunID(s).CreatedAt()
		return "", fmt.Errorf("%q is not a run id: %w", s, err)
	}
	return RunID(s), nil
}

// realTime reports whether a well-formed id's timestamp is a real time,
// as time.Parse of runIDTime would (months 1-12, days of that month,
// hours 0-23, minutes and seconds 0-59), without parsing it: crew checks
// every name it lists in a shard, and listing a crowded hour of 100,000
// runs spent most of its time in time.Parse.
func realTime(s string) bool {
	year := num2(s, 2)*100 + num2(s, 4)
	month, day := num2(s, 6), num2(s, 8)
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) {
		return false
	}
	return num2(s, 11) < 24 && num2(s, 13) < 60 && num2(s, 15) < 60
}

// num2 is the two-digit number at s[i:i+2].
func num2(s string, i int) int { return int(s[i]-'0')*10 + int(s[i+1]-'0') }

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// wellFormed checks the shape r-DDDDDDDDTDDDDDD.DDDDDDDDDZ-hhhhhhhhhhhhhhhh
// by hand: it runs for every file admission lists, and a regular
// expression costs a compile at start-up and a slow match per call. The
// separators first, then each run of digits in a loop of its own: a loop
// that asked at every byte which part of the id it was in cost admission
// 5% of a pass over 200 active runs.
func wellFormed(s string) bool {
	if len(s) != RunIDLen || s[0] != 'r' || s[1] != '-' || s[10] != 'T' || s[17] != '.' || s[27] != 'Z' || s[28] != '-' {
		return false
	}
	return allDigits(s[2:10]) && allDigits(s[11:17]) && allDigits(s[18:27]) && allLowerHex(s[29:])
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i]-'0' > 9 {
			return false
		}
	}
	return true
}

// allLowerHex ORs a table lookup per byte rather than branching on each:
// the random part of an id is random, so whether a byte is a digit or a
// letter is a coin toss that a branch predictor loses, and a branch per
// byte made this loop half of LooksLikeRunID's time.
func allLowerHex(s string) bool {
	var bad uint8
	for i := 0; i < len(s); i++ {
		bad |= notLowerHex[s[i]]
	}
	return bad == 0
}

var notLowerHex = func() (t [256]uint8) {
	for c := range t {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			t[c] = 1
		}
	}
	return t
}()

// WellFormedRunID reports whether s has the shape of a run id, without
// checking that its timestamp is a real time (what LooksLikeRunID adds):
// for names read in bulk from a file crew wrote.
func WellFormedRunID(s string) bool { return wellFormed(s) }

// LooksLikeRunID reports whether s is a valid run id: what ParseRunID
// accepts.
func LooksLikeRunID(s string) bool { return wellFormed(s) && realTime(s) }

// Shard is the creation hour (UTC) as YYYY-MM-DDTHH: the group of finished
// runs the run belongs to. Hours, not days, so that listing the newest
// shard (what status does) stays small even at thousands of runs an hour;
// the names sort in time order.
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

// Short ids: crew shows a run as the first ShortLen hex digits of its id's
// random part (3f2a9c0d for r-20261129T100211.123456789Z-3f2a9c0d1e4b5a69),
// and accepts from MinShortLen to 16 of them, wherever it accepts a run id,
// as long as they name one run. They are not prefixes of the id (ids made in
// the same second share 18 characters), but of its random part, which is
// what tells runs apart.
const (
	ShortLen    = 8
	MinShortLen = 4
	randomAt    = RunIDLen - 16
)

// Short is the id as crew shows it where space is short.
func (id RunID) Short() string {
	if len(id) != RunIDLen {
		return string(id)
	}
	return string(id[randomAt : randomAt+ShortLen])
}

// HasShort reports whether s (a short id) begins the id's random part.
func (id RunID) HasShort(s string) bool {
	return len(id) == RunIDLen && len(s) <= 16 && string(id[randomAt:randomAt+len(s)]) == s
}

// IsShortID reports whether s has the shape of a short id: MinShortLen to
// 16 lowercase hex digits.
func IsShortID(s string) bool {
	if len(s) < MinShortLen || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
