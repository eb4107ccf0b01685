package record

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewRunIDFormat(t *testing.T) {
	now := time.Date(2024, 3, 9, 17, 4, 5, 6, time.UTC)
	id := NewRunID(now)
	re := regexp.MustCompile(`^r-20240309T170405\.000000006Z-[0-9a-f]{16}$`)
	if !re.MatchString(string(id)) {
		t.Fatalf("NewRunID = %q, want r-20240309T170405.000000006Z-<16 hex>", id)
	}
	if _, err := ParseRunID(string(id)); err != nil {
		t.Fatalf("ParseRunID(NewRunID()) = %v", err)
	}
	if !LooksLikeRunID(string(id)) {
		t.Fatal("LooksLikeRunID(NewRunID()) = false")
	}
	if got := id.Shard(); got != "2024-03-09T17" {
		t.Errorf("Shard() = %q, want 2024-03-09T17", got)
	}
	at, err := id.CreatedAt()
	if err != nil {
		t.Fatal(err)
	}
	if !at.Equal(now) {
		t.Errorf("CreatedAt() = %v, want %v (nanosecond precision)", at, now)
	}
	// Safe as a file name: no separators, no leading dot.
	if strings.ContainsAny(string(id), `/\`+"\x00") || strings.HasPrefix(string(id), ".") {
		t.Errorf("id %q is not a safe file name", id)
	}
}

func TestNewRunIDUsesUTC(t *testing.T) {
	// 23:30 on the 1st at UTC-5 is 04:30 on the 2nd in UTC: both the
	// timestamp and the day shard are UTC.
	local := time.Date(2024, 1, 1, 23, 30, 0, 0, time.FixedZone("EST", -5*3600))
	id := NewRunID(local)
	if !strings.HasPrefix(string(id), "r-20240102T043000.000000000Z-") {
		t.Fatalf("NewRunID(local) = %q, want the UTC time", id)
	}
	if id.Shard() != "2024-01-02T04" {
		t.Errorf("Shard() = %q, want 2024-01-02T04", id.Shard())
	}
	at, err := id.CreatedAt()
	if err != nil || !at.Equal(local) {
		t.Errorf("CreatedAt() = %v, %v; want %v", at, err, local)
	}
}

func TestNewRunIDUnique(t *testing.T) {
	// Same instant for all: uniqueness must come from the random part.
	now := time.Now()
	seen := make(map[RunID]bool, 10000)
	for range 10000 {
		id := NewRunID(now)
		if seen[id] {
			t.Fatalf("duplicate run id %s", id)
		}
		seen[id] = true
	}
}

func TestRunIDLexicalOrderIsCreationOrder(t *testing.T) {
	// Times chosen to break any non-fixed-width encoding: digit-count
	// changes in every field, nanoseconds that would lose leading zeros,
	// month/day/hour rollovers.
	base := time.Date(2023, 12, 31, 23, 59, 59, 999_999_990, time.UTC)
	var times []time.Time
	for i := range 20 {
		times = append(times, base.Add(time.Duration(i)))
	}
	times = append(times,
		time.Date(2024, 1, 1, 0, 0, 0, 1_000_000_000-1, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 1, 0, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 1, 9, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 1, 10, time.UTC),
		time.Date(2024, 1, 1, 0, 0, 1, 100_000_000, time.UTC),
		time.Date(2024, 1, 1, 9, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 1, 10, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 9, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 9, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 10, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
	)
	// And 10000 from one instant on, a step of 1µs plus a few ns.
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10000 {
		times = append(times, now.Add(time.Duration(i)*time.Microsecond+time.Duration(i%7)))
	}
	ids := make([]RunID, len(times))
	for i, tm := range times {
		ids[i] = NewRunID(tm)
	}
	for i := 1; i < len(ids); i++ {
		if !times[i-1].Before(times[i]) {
			t.Fatalf("test bug: times not increasing at %d", i)
		}
		if ids[i-1] >= ids[i] {
			t.Fatalf("id %s (created %v) sorts after %s (created %v)", ids[i-1], times[i-1], ids[i], times[i])
		}
	}
	shuffled := slices.Clone(ids)
	slices.Reverse(shuffled)
	slices.Sort(shuffled)
	if !slices.Equal(shuffled, ids) {
		t.Fatal("sorting ids does not give creation order")
	}
	// Fixed width.
	for _, id := range ids {
		if len(id) != len(ids[0]) {
			t.Fatalf("id %s has length %d, want %d", id, len(id), len(ids[0]))
		}
	}
}

func TestRunIDOrderFromRealClock(t *testing.T) {
	// ids made one after another from the wall clock sort in the order
	// they were made, whenever the clock moved between them.
	var times []time.Time
	var ids []RunID
	for range 10000 {
		now := time.Now().Round(0) // wall clock only, as in the id
		times = append(times, now)
		ids = append(ids, NewRunID(now))
	}
	for i := 1; i < len(ids); i++ {
		if times[i-1].Before(times[i]) && ids[i-1] >= ids[i] {
			t.Fatalf("id %s (made at %v) sorts after the later %s (%v)", ids[i-1], times[i-1], ids[i], times[i])
		}
	}
}

func TestParseRunID(t *testing.T) {
	valid := "r-20240102T030405.000000006Z-0123456789abcdef"
	if id, err := ParseRunID(valid); err != nil || string(id) != valid {
		t.Fatalf("ParseRunID(%q) = %q, %v", valid, id, err)
	}
	invalid := []string{
		"",
		"r-",
		"20240102T030405.000000006Z-0123456789abcdef",    // no prefix
		"R-20240102T030405.000000006Z-0123456789abcdef",  // wrong prefix case
		"r-20240102T030405.000000006Z-0123456789ABCDEF",  // upper-case hex
		"r-20240102T030405.000000006Z-0123456789abcde",   // 15 hex
		"r-20240102T030405.000000006Z-0123456789abcdef0", // 17 hex
		"r-20240102T030405.00000006Z-0123456789abcdef",   // 8-digit nanos
		"r-20240102T030405Z-0123456789abcdef",            // no nanos
		"r-20240102T030405.000000006-0123456789abcdef",   // no Z
		"r-2024-01-02T03:04:05.000000006Z-0123456789abcdef",
		"r-20240102T030405.000000006Z-0123456789abcdeg",
		"r-20240102T030405.000000006Z-0123456789abcdef\n",
		"r-20240102T030405.000000006Z-0123456789abcdef.json",
		" r-20240102T030405.000000006Z-0123456789abcdef",
		"../r-20240102T030405.000000006Z-0123456789abcdef",
		"r-20240102T030405.000000006Z-0123456789abcdef/..",
		"r-２0240102T030405.000000006Z-0123456789abcdef", // non-ASCII digit
	}
	for _, s := range invalid {
		if id, err := ParseRunID(s); err == nil {
			t.Errorf("ParseRunID(%q) = %q, want an error", s, id)
		} else if !strings.Contains(err.Error(), "not a run id") {
			t.Errorf("ParseRunID(%q) error %q", s, err)
		}
		if LooksLikeRunID(s) {
			t.Errorf("LooksLikeRunID(%q) = true", s)
		}
	}
}

func TestRunIDDayAndCreatedAtOnMalformedIDs(t *testing.T) {
	// Never panics, whatever the string.
	for _, s := range []string{"", "r", "r-2024", "r-20240102", "r-20240102T", "r-99999999T999999.999999999Z-x"} {
		id := RunID(s)
		_ = id.Shard()
		if _, err := id.CreatedAt(); err == nil {
			t.Errorf("CreatedAt(%q) succeeded", s)
		}
	}
	if d := RunID("r-2024").Shard(); d != "unknown" {
		t.Errorf("Day of a short id = %q, want unknown", d)
	}
}

func TestShortIDs(t *testing.T) {
	id := RunID("r-20261129T100211.123456789Z-3f2a9c0d1e4b5a69")
	if got := id.Short(); got != "3f2a9c0d" {
		t.Errorf("Short() = %q", got)
	}
	for s, want := range map[string]bool{"3f2a": true, "3f2a9c0d1e4b5a69": true, "3f2b": false, "3f2a9c0d1e4b5a69f": false} {
		if got := id.HasShort(s); got != want {
			t.Errorf("HasShort(%q) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{"3f2a": true, "deadbeef": true, "3f2": false, "3F2A": false, "build": false, "0123456789abcdef0": false} {
		if got := IsShortID(s); got != want {
			t.Errorf("IsShortID(%q) = %v, want %v", s, got, want)
		}
	}
}

// realTime replaces time.Parse in ParseRunID; it must accept exactly the
// timestamps time.Parse accepts. Every month and day from 00 to 39 of
// leap, common and century years, and hours, minutes and seconds around
// their limits.
func TestRealTimeAgreesWithTimeParse(t *testing.T) {
	check := func(ts string) {
		t.Helper()
		id := "r-" + ts + "-0123456789abcdef"
		require.True(t, wellFormed(id), id)
		_, err := time.Parse(runIDTime, ts)
		require.Equal(t, err == nil, realTime(id), "%s: time.Parse says %v", ts, err)
	}
	for _, year := range []string{"0000", "1900", "2000", "2024", "2026", "2100", "9999"} {
		for month := 0; month <= 13; month++ {
			for day := 0; day <= 39; day++ {
				check(fmt.Sprintf("%s%02d%02dT120000.000000000Z", year, month, day))
			}
		}
	}
	for _, v := range []int{0, 1, 23, 24, 25, 59, 60, 61, 99} {
		check(fmt.Sprintf("20261201T%02d0000.000000000Z", v))
		check(fmt.Sprintf("20261201T00%02d00.000000000Z", v))
		check(fmt.Sprintf("20261201T0000%02d.999999999Z", v))
	}
}

// wellFormed is a hand-written match of this expression: every id with
// one byte changed to any other, or one byte longer or shorter, gets the
// same verdict from both.
func TestWellFormedAgreesWithRegexp(t *testing.T) {
	re := regexp.MustCompile(`^r-[0-9]{8}T[0-9]{6}\.[0-9]{9}Z-[0-9a-f]{16}$`)
	id := []byte("r-20261201T100211.123456789Z-3f2a9c0d1e4b5a69")
	check := func(s string) {
		t.Helper()
		require.Equal(t, re.MatchString(s), wellFormed(s), "%q", s)
		_, err := ParseRunID(s)
		require.Equal(t, err == nil, LooksLikeRunID(s), "%q", s)
	}
	check(string(id))
	for i := range id {
		for c := range 256 {
			b := slices.Clone(id)
			b[i] = byte(c)
			check(string(b))
		}
		check(string(id[:i]))
		check(string(slices.Insert(slices.Clone(id), i, id[i])))
	}
}

// BenchmarkLooksLikeRunID: admission asks for every name in the active
// set and every line of the active index. Random is many new ids, whose hex digits a branch predictor cannot learn
// (as it learns the two valid ones).
func BenchmarkLooksLikeRunID(b *testing.B) {
	var random []string
	for i := range 1000 {
		random = append(random, string(NewRunID(time.Now().Add(time.Duration(i)*time.Second))))
	}
	for _, c := range []struct {
		name string
		ids  []string
	}{
		{"valid", []string{"r-20261201T100211.123456789Z-3f2a9c0d1e4b5a69", "r-20240229T235959.999999999Z-0123456789abcdef"}},
		{"random", random},
		{"invalid", []string{"r-20261201T100211.123456789Z-3f2a9c0d1e4b5a6G", "r-20261301T100211.123456789Z-3f2a9c0d1e4b5a69"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				for _, id := range c.ids {
					LooksLikeRunID(id)
				}
			}
		})
	}
}
