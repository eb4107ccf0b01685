//go:build linux

package fdbudget

import "syscall"

// openBelow counts the open descriptors numbered below limit, as
// /proc/self/fd lists them (without the one reading it); false if it
// cannot be read.
func openBelow(limit uint64) (int, bool) {
	dir, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer syscall.Close(dir)
	var buf [4096]byte
	open := 0
	for {
		n, err := syscall.Getdents(dir, buf[:])
		if err != nil {
			return 0, false
		}
		if n == 0 {
			return open, true
		}
		_, _, names := syscall.ParseDirent(buf[:n], -1, nil)
		for _, name := range names {
			if fd, isFD := atoi(name); isFD && fd != dir && uint64(fd) < limit {
				open++
			}
		}
	}
}

// atoi parses a descriptor number; strconv would be another import.
func atoi(s string) (int, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
