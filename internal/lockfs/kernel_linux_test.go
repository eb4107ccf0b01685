package lockfs

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// writeLocksByFields is how WriteLocks parsed the table before it learnt
// to do so without allocating, split at the kernel's white space (ASCII
// spaces and tabs; a CR for good measure). The parser must agree with it
// on any input.
func writeLocksByFields(table string) map[[2]uint64]bool {
	held := map[[2]uint64]bool{}
	for line := range strings.SplitSeq(table, "\n") {
		fields := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' })
		if len(fields) < 6 || fields[1] == "->" || fields[3] != "WRITE" {
			continue
		}
		majS, rest, _ := strings.Cut(fields[5], ":")
		minS, inoS, _ := strings.Cut(rest, ":")
		maj, err1 := strconv.ParseUint(majS, 16, 32)
		min, err2 := strconv.ParseUint(minS, 16, 32)
		ino, err3 := strconv.ParseUint(inoS, 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			held[[2]uint64{unix.Mkdev(uint32(maj), uint32(min)), ino}] = true
		}
	}
	return held
}

func parseWriteLocks(table string) map[[2]uint64]bool { return writeLocks([]byte(table)) }

// procLocks is a lock table as Linux prints it, with the lines a parser
// must skip.
const procLocks = `1: POSIX  ADVISORY  WRITE 4711 fe:01:9980352 0 EOF
1: -> POSIX  ADVISORY  WRITE 4712 fe:01:9980352 0 EOF
 1: -> FLOCK  ADVISORY  WRITE 4713 fe:01:9980353 0 EOF
2: FLOCK  ADVISORY  WRITE 4714 00:2a:17 0 EOF
3: FLOCK  ADVISORY  READ 4715 00:2a:18 0 EOF
4: OFDLCK ADVISORY  WRITE -1 103:02:123456789 0 EOF
5: OFDLCK ADVISORY  READ -1 103:02:5 0 EOF
6: POSIX  ADVISORY  WRITE 4716 FE:0A:42 0 100
7: LEASE  ACTIVE    WRITE 4717 08:01:77 0 EOF
8: DELEG  ACTIVE    READ 4718 08:01:78 0 EOF
9: FLOCK  ADVISORY  WRITE 4719 00:2a:
10: FLOCK  ADVISORY  WRITE 4720 00:2a:x1 0 EOF
11: FLOCK  ADVISORY  WRITE 4721 0x1:2a:19 0 EOF
12: FLOCK  ADVISORY  WRITE 4722 100000000:00:20 0 EOF
13: FLOCK  ADVISORY  WRITE 4723 00:2a:18446744073709551616 0 EOF
14: FLOCK  ADVISORY  WRITE 4724 00:2a:18446744073709551615 0 EOF
15: FLOCK  ADVISORY  WRITE 4725 00:2a:21:5 0 EOF
16: FLOCK  ADVISORY  WRITE
17: FLOCK ADVISORY write 4726 00:2a:22 0 EOF

garbage
18:	FLOCK	ADVISORY	WRITE	4727	00:2b:23	0	EOF` + "\r\n" +
	"19: FLOCK  ADVISORY  WRITE 4728 00:2b:24\r\n" +
	"20: FLOCK\u00a0ADVISORY  WRITE 4729 00:2b:25 0 EOF\n" + // not the kernel's white space: one field
	"21: FLOCK  ADVISORY  WRITE 4730 00:2b:26\u00a00 EOF\n" +
	"22: FLOCK  ADVISORY  WRITE 4731 00:2b:27 0 \u00e9\n" +
	"23: FLOCK  ADVISORY  WRITE 4733 00:2b:29\u00e9 0 EOF\n" +
	"24: FLOCK  ADVISORY  WRITE 4732 00:2b:28 0 EOF"

func TestWriteLocksParsesTheKernelTable(t *testing.T) {
	key := func(maj, min uint32, ino uint64) [2]uint64 { return [2]uint64{unix.Mkdev(maj, min), ino} }
	want := map[[2]uint64]bool{
		key(0xfe, 0x01, 9980352):              true, // POSIX; its waiters hold nothing
		key(0x00, 0x2a, 17):                   true, // FLOCK
		key(0x103, 0x02, 123456789):           true, // OFDLCK, no pid
		key(0xfe, 0x0a, 42):                   true, // upper-case hex
		key(0x08, 0x01, 77):                   true, // a write lease is a write lock
		key(0x00, 0x2a, 18446744073709551615): true, // largest inode
		key(0x00, 0x2b, 23):                   true, // tabs
		key(0x00, 0x2b, 24):                   true, // CRLF, only six fields
		key(0x00, 0x2b, 27):                   true, // non-ASCII after the sixth field
		key(0x00, 0x2b, 28):                   true, // no newline at the end
	}
	got := parseWriteLocks(procLocks)
	if !maps.Equal(got, want) {
		t.Errorf("parsed\n%v\nwant\n%v", got, want)
	}
	if old := writeLocksByFields(procLocks); !maps.Equal(got, old) {
		t.Errorf("parsed\n%v\nsplitting into fields parses\n%v", got, old)
	}
}

// TestWriteLocksReadsTheKernel: WriteLocks sees a lock this process holds,
// and parses the real table as splitting it into fields would.
func TestWriteLocksReadsTheKernel(t *testing.T) {
	d := newLockDir(t)
	l, err := Create(d.root, testLockName)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var st unix.Stat_t
	if err := unix.Fstat(int(l.File().Fd()), &st); err != nil {
		t.Fatal(err)
	}
	held, err := WriteLocks()
	if err != nil {
		t.Fatal(err)
	}
	if !held[[2]uint64{st.Dev, st.Ino}] {
		t.Fatalf("WriteLocks does not list the lock this test holds (dev %d ino %d): %v", st.Dev, st.Ino, held)
	}
	table, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	if got, old := parseWriteLocks(string(table)), writeLocksByFields(string(table)); !maps.Equal(got, old) {
		t.Errorf("parsed /proc/locks as\n%v\nsplitting into fields parses\n%v\n%s", got, old, table)
	}
}

func FuzzWriteLocks(f *testing.F) {
	for line := range strings.SplitSeq(procLocks, "\n") {
		f.Add(line)
	}
	f.Add(procLocks)
	f.Fuzz(func(t *testing.T, table string) {
		if got, old := parseWriteLocks(table), writeLocksByFields(table); !maps.Equal(got, old) {
			t.Errorf("%q: parsed as %v, splitting into fields parses %v", table, got, old)
		}
	})
}

// BenchmarkWriteLocksParse parses a table of 400 write locks (what 200
// active runs hold), as WriteLocks does and as strings.Fields did.
func BenchmarkWriteLocksParse(b *testing.B) {
	var sb strings.Builder
	for i := range 400 {
		fmt.Fprintf(&sb, "%d: FLOCK  ADVISORY  WRITE %d fe:01:%d 0 EOF\n", i+1, 4000+i, 9980000+i)
	}
	table := sb.String()
	b.Run("bytes", func(b *testing.B) {
		data := []byte(table)
		for b.Loop() {
			writeLocks(data)
		}
	})
	b.Run("fields", func(b *testing.B) {
		for b.Loop() {
			writeLocksByFields(table)
		}
	})
}
