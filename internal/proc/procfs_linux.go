//go:build linux

package proc

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errUnreadable: the process's descriptors may not be read by crew.
var errUnreadable = errors.New("descriptors not readable")

// heldFiles returns which of the wanted files pid holds an exclusive flock
// on through one of its descriptors. A descriptor counts only if it names
// the file (fstat through /proc/<pid>/fd/<n>) and /proc/<pid>/fdinfo/<n>
// shows that very descriptor's open file holding the lock: a process that
// merely opened the file (crew status probing it) does not count.
func heldFiles(pid int, want map[FileID]bool) ([]FileID, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return nil, errUnreadable
	case err != nil:
		return nil, err // gone, most likely
	}
	defer unix.Close(dfd)
	names, err := readDirents(dfd)
	if err != nil {
		return nil, err
	}
	var out []FileID
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, 0) != nil {
			continue // closed meanwhile, or not ours to see
		}
		id := FileID{Dev: st.Dev, Ino: st.Ino}
		if want[id] && fdHoldsFlock(pid, name, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// fdHoldsFlock reports whether /proc/<pid>/fdinfo/<fd> lists an exclusive
// flock on file id held through that descriptor. The kernel lists a lock
// there only for the open file that owns it. Its line reads, e.g.,
// "lock:	1: FLOCK  ADVISORY  WRITE 4711 fe:00:9978286 0 EOF".
func fdHoldsFlock(pid int, fd string, id FileID) bool {
	b, err := readSmall("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + fd)
	if err != nil {
		return false
	}
	devIno := fmt.Sprintf("%02x:%02x:%d", unix.Major(id.Dev), unix.Minor(id.Dev), id.Ino)
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "lock:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		// "1:" "FLOCK" "ADVISORY" "WRITE" pid dev:ino start end
		if len(f) >= 6 && f[1] == "FLOCK" && f[3] == "WRITE" && f[5] == devIno {
			return true
		}
	}
	return false
}

// stat is the part of /proc/<pid>/stat crew uses.
type stat struct {
	state byte
	pgrp  int
	start uint64 // clock ticks after boot: tells a reused pid apart
}

func readStat(pid int) (stat, error) {
	b, err := readSmall("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	// "pid (comm) state ppid pgrp ..."; comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return stat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	// f[k-3] is field k of proc(5): 3 state, 5 pgrp, 22 starttime.
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return stat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return stat{state: f[0][0], pgrp: pgrp, start: start}, nil
}

// readSmall reads a /proc file of a few hundred bytes in one read.
func readSmall(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func readDirNames(path string) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readDirents(fd)
}

// readDirents lists a directory's entries (without . and ..).
func readDirents(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}
