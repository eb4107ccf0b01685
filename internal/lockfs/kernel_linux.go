package lockfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

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
	sc := tableScratch.Get().(*lockScratch)
	defer sc.put()
	// One large buffer: the kernel fills a read with as many lines as fit,
	// so the table comes in one read (and one more for the end) rather than
	// a page at a time. The buffer is reused: admission reads the table on
	// every pass.
	if sc.buf, err = readAll(f, sc.buf[:0]); err != nil {
		return nil, fmt.Errorf("read the kernel's lock table: %w", err)
	}
	sc.keys = appendWriteLocks(sc.keys[:0], sc.buf)
	held := make(map[[2]uint64]bool, len(sc.keys))
	for _, k := range sc.keys {
		held[k] = true
	}
	return held, nil
}

// lockScratch is what one WriteLocks needs and need not allocate again:
// the table as read, and the keys parsed from it (collected first so that
// the map is made at its final size).
type lockScratch struct {
	buf  []byte
	keys [][2]uint64
}

var tableScratch = sync.Pool{New: func() any {
	return &lockScratch{buf: make([]byte, 0, 64<<10)}
}}

// put returns the scratch to the pool, unless an unusually large table
// made it too big to keep.
func (sc *lockScratch) put() {
	if cap(sc.buf) <= 1<<20 && cap(sc.keys) <= 16<<10 {
		tableScratch.Put(sc)
	}
}

// readAll appends what f holds up to EOF to buf, growing it as needed.
func readAll(f *os.File, buf []byte) ([]byte, error) {
	if cap(buf) == 0 {
		buf = make([]byte, 0, 64<<10)
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// appendWriteLocks appends to keys the (device, inode) of every write lock
// the table lists: lines whose fourth field is WRITE and that are not
// blocked waiters ("->" second), keyed by their sixth field. It reads the
// table as strings.Fields would split each line, without allocating.
func appendWriteLocks(keys [][2]uint64, table []byte) [][2]uint64 {
	for len(table) > 0 {
		line := table
		if i := bytes.IndexByte(table, '\n'); i >= 0 {
			line, table = table[:i], table[i+1:]
		} else {
			table = nil
		}
		// "1: FLOCK  ADVISORY  WRITE 4711 fe:00:9980352 0 EOF"; waiters
		// blocked on a lock are listed as "1: -> FLOCK ..." and hold nothing.
		var fields [6][]byte
		n, ascii := firstFields(line, &fields)
		if !ascii {
			// Not what the kernel writes; split as strings.Fields does
			// (Unicode spaces), in the slow way.
			all := strings.Fields(string(line))
			n = min(len(all), len(fields))
			for i := range n {
				fields[i] = []byte(all[i])
			}
		}
		if n < 6 || string(fields[1]) == "->" || string(fields[3]) != "WRITE" {
			continue
		}
		if k, ok := devInoBytes(fields[5]); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// firstFields splits off up to len(fields) leading fields of line, split
// at runs of ASCII white space as strings.Fields does, and returns how many
// it found. ascii is false if it met a byte outside ASCII before it was
// done: strings.Fields would decode it, and it might be a Unicode space.
func firstFields(line []byte, fields *[6][]byte) (n int, ascii bool) {
	i := 0
	for n < len(fields) {
		for i < len(line) && asciiSpace[line[i]] {
			i++
		}
		if i == len(line) {
			return n, true
		}
		start := i
		for i < len(line) {
			c := line[i]
			if c >= 0x80 {
				return n, false
			}
			if c <= ' ' && asciiSpace[c] {
				break
			}
			i++
		}
		fields[n] = line[start:i]
		n++
	}
	return n, true
}

// asciiSpace is strings.Fields' white space in ASCII.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// devInoBytes parses a /proc/locks "maj:min:ino" field (major and minor in
// hex, at most 32 bits; inode in decimal), accepting exactly what three
// strconv.ParseUint calls on its parts would.
func devInoBytes(field []byte) ([2]uint64, bool) {
	majS, rest := cutColon(field)
	minS, inoS := cutColon(rest)
	maj, ok1 := parseHex32(majS)
	min, ok2 := parseHex32(minS)
	ino, ok3 := parseDec64(inoS)
	if !ok1 || !ok2 || !ok3 {
		return [2]uint64{}, false
	}
	return [2]uint64{unix.Mkdev(maj, min), ino}, true
}

// cutColon is strings.Cut(s, ":") on bytes.
func cutColon(s []byte) (before, after []byte) {
	if i := bytes.IndexByte(s, ':'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, nil
}

// parseHex32 is strconv.ParseUint(s, 16, 32) without the string.
func parseHex32(s []byte) (uint32, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
		if v > math.MaxUint32 {
			return 0, false
		}
	}
	return uint32(v), true
}

// parseDec64 is strconv.ParseUint(s, 10, 64) without the string.
func parseDec64(s []byte) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		d := uint64(c - '0')
		if v+d < v {
			return 0, false
		}
		v += d
	}
	return v, true
}
