package lockfs

import (
	"bufio"
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
