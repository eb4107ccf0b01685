package helperproc

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BlockedOn waits until process pid is blocked in flock on the file (or
// directory) at path, as /proc/locks shows it ("->" lines are waiters):
// the condition a test waits for instead of sleeping and hoping the other
// side got there.
func BlockedOn(t testing.TB, path string, pid int) {
	t.Helper()
	BlockedOnN(t, path, pid, 1)
}

// BlockedOnN is BlockedOn for n waiters of process pid (its goroutines).
func BlockedOnN(t testing.TB, path string, pid, n int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprint(fi.Sys().(*syscall.Stat_t).Ino)
	deadline := time.Now().Add(LineTimeout)
	for {
		b, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Skipf("cannot see blocked lock waiters here: %v", err)
		}
		waiting := 0
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			// 1: -> FLOCK ADVISORY WRITE <pid> <maj>:<min>:<ino> 0 EOF
			if len(f) < 7 || f[1] != "->" || f[5] != fmt.Sprint(pid) {
				continue
			}
			if devIno := f[6]; devIno[strings.LastIndexByte(devIno, ':')+1:] == ino {
				waiting++
			}
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has %d of %d waiters blocked on %s after %s", pid, waiting, n, path, LineTimeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
