package lockfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HeldInKernel asks the kernel whether anyone holds a lock on the file
// (dev, ino), whatever its name now (it may have been removed or replaced):
// /proc/locks lists every lock held, by device and inode.
func HeldInKernel(dev, ino uint64) (bool, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return false, fmt.Errorf("read the kernel's lock table: %w", err)
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 4711 fe:00:9980352 0 EOF"; waiters
		// blocked on a lock are listed as "1: -> FLOCK ..." and hold nothing.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] == "->" {
			continue
		}
		if fields[5] == want || sameDevIno(fields[5], dev, ino) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read the kernel's lock table: %w", err)
	}
	return false, nil
}

// sameDevIno compares a /proc/locks "maj:min:ino" field with dev and ino,
// whatever width the kernel printed the numbers in.
func sameDevIno(field string, dev, ino uint64) bool {
	parts := strings.Split(field, ":")
	if len(parts) != 3 {
		return false
	}
	maj, err1 := strconv.ParseUint(parts[0], 16, 32)
	min, err2 := strconv.ParseUint(parts[1], 16, 32)
	in, err3 := strconv.ParseUint(parts[2], 10, 64)
	return err1 == nil && err2 == nil && err3 == nil &&
		uint32(maj) == unix.Major(dev) && uint32(min) == unix.Minor(dev) && in == ino
}

// WriteLocks reads the kernel's lock table once and returns the files that
// some process holds an exclusive (write) lock on, by device and inode. It
// is positive evidence only: the table may leave out locks held in other
// pid namespaces, so a file missing from it must still be probed.
func WriteLocks() (map[[2]uint64]bool, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, fmt.Errorf("read the kernel's lock table: %w", err)
	}
	defer f.Close()
	// One large buffer: the kernel fills a read with as many lines as fit,
	// so the table comes in one read (and one more for its end) rather
	// than a page at a time.
	table := bytes.NewBuffer(make([]byte, 0, 64<<10))
	if _, err := table.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("read the kernel's lock table: %w", err)
	}
	return writeLocks(table.Bytes()), nil
}

// writeLocks parses the table: the (device, inode) of every write lock it
// lists, keyed by the sixth field of lines whose fourth is WRITE, except
// waiters blocked on a lock ("->" second), which hold nothing. The map is
// made once, for as many locks as the table has lines: admission reads the
// table on every pass, and growing the map was most of the parse.
func writeLocks(table []byte) map[[2]uint64]bool {
	held := make(map[[2]uint64]bool, bytes.Count(table, []byte{'\n'}))
	for line := range bytes.Lines(table) {
		// "1: FLOCK  ADVISORY  WRITE 4711 fe:00:9980352 0 EOF"
		var f [6][]byte
		if fields(line, f[:]) < len(f) || string(f[1]) == "->" || string(f[3]) != "WRITE" {
			continue
		}
		if k, ok := devIno(f[5]); ok {
			held[k] = true
		}
	}
	return held
}

// fields fills f with the leading fields of line, split at runs of spaces
// and tabs (the kernel writes the table in ASCII), and returns how many it
// found: bytes.Fields without allocating a slice per line.
func fields(line []byte, f [][]byte) int {
	n, start := 0, -1
	for i, c := range line {
		space := c == ' ' || c == '\t' || c == '\r' || c == '\n'
		switch {
		case !space && start < 0:
			start = i
		case space && start >= 0:
			f[n], start = line[start:i], -1
			if n++; n == len(f) {
				return n
			}
		}
	}
	if start >= 0 {
		f[n] = line[start:]
		n++
	}
	return n
}

// devIno parses a /proc/locks "maj:min:ino" field (major and minor in hex).
// The string conversions do not allocate: strconv keeps no reference.
func devIno(field []byte) ([2]uint64, bool) {
	majS, rest, _ := bytes.Cut(field, []byte{':'})
	minS, inoS, _ := bytes.Cut(rest, []byte{':'})
	maj, err1 := strconv.ParseUint(string(majS), 16, 32)
	min, err2 := strconv.ParseUint(string(minS), 16, 32)
	ino, err3 := strconv.ParseUint(string(inoS), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return [2]uint64{}, false
	}
	return [2]uint64{unix.Mkdev(uint32(maj), uint32(min)), ino}, true
}
