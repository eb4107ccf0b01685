package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The observer: every observed command opens a FIFO of its own that the
// test reads, writes a start line (its clock, pid, host, run id) and, if
// it ends by itself, an end line. The test sees the FIFO's end of file
// when the last process holding it is gone: the shell and whatever it
// runs (a sleep, a gate loop), so killed commands are seen dying too, with
// no line from them. Times are the commands' own (start, end) or, for a
// death, when the test saw it: a late reader can only make a command look
// longer-lived, so it errs towards failing, never towards passing.
type observer struct {
	t   *testing.T
	dir string
	mu  sync.Mutex
	all []*obsRun
	n   int
}

type obsRun struct {
	label   string
	fifo    string
	started chan struct{} // closed at the start line
	done    chan struct{} // closed at end of file

	// Set before started is closed:
	startAt time.Time
	pid     int
	host    string
	runID   string
	// Set before done is closed:
	endAt    time.Time // the end line's time, else when the FIFO closed
	eofAt    time.Time
	byItself bool // wrote its end line
	ran      bool // wrote its start line
}

func newObserver(t *testing.T, dir string) *observer {
	o := &observer{t: t, dir: dir}
	t.Cleanup(o.cleanup)
	return o
}

// obsScript wraps body (sh, with the arguments args) as an observed command.
// The FIFO is fd 9: fd 3 is the run's owner lock on a local store, which
// the command and whatever it leaves behind must keep.
const obsScript = `exec 9>"$1"; shift
echo "start $(date +%s%N) $$ $CREW_HOST $CREW_RUN_ID" >&9
( BODY )
rc=$?
echo "end $(date +%s%N)" >&9
exit $rc`

// cmd returns the command line of an observed command running body.
func (o *observer) cmd(label, body string, args ...string) ([]string, *obsRun) {
	o.mu.Lock()
	o.n++
	fifo := filepath.Join(o.dir, fmt.Sprintf("obs-%d.fifo", o.n))
	o.mu.Unlock()
	require.NoError(o.t, syscall.Mkfifo(fifo, 0o600))
	r := &obsRun{label: label, fifo: fifo, started: make(chan struct{}), done: make(chan struct{})}
	o.mu.Lock()
	o.all = append(o.all, r)
	o.mu.Unlock()
	go r.read()
	script := strings.Replace(obsScript, "BODY", body, 1)
	return append([]string{"sh", "-c", script, "observed-" + label, fifo}, args...), r
}

// sleeper is an observed command that sleeps d.
func (o *observer) sleeper(label string, d time.Duration) ([]string, *obsRun) {
	return o.cmd(label, fmt.Sprintf("sleep %.3f", d.Seconds()))
}

func (r *obsRun) read() {
	defer close(r.done)
	// Blocks until the command opens its end (or cleanup does).
	fh, err := os.OpenFile(r.fifo, os.O_RDONLY, 0)
	if err != nil {
		r.eofAt, r.endAt = time.Now(), time.Now()
		return
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "start" && !r.ran:
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			r.startAt = time.Unix(0, ns)
			r.pid, _ = strconv.Atoi(f[2])
			if len(f) >= 5 {
				r.host, r.runID = f[3], f[4]
			}
			r.ran = true
			close(r.started)
		case len(f) == 2 && f[0] == "end":
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			r.endAt, r.byItself = time.Unix(0, ns), true
		}
	}
	r.eofAt = time.Now()
	if !r.byItself {
		r.endAt = r.eofAt
	}
}

// waitStarted waits until the command has written its start line.
func (r *obsRun) waitStarted(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-r.started:
	case <-r.done:
		if !r.hasStarted() { // both may be closed: select picks either
			t.Fatalf("observed command %s ended without starting", r.label)
		}
	case <-time.After(timeout):
		t.Fatalf("observed command %s did not start within %s", r.label, timeout)
	}
}

// waitDone waits until every process holding the command's FIFO is gone.
func (r *obsRun) waitDone(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("observed command %s (run %s) still alive after %s", r.label, r.runID, timeout)
	}
}

func (r *obsRun) isDone() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *obsRun) hasStarted() bool {
	select {
	case <-r.started:
		return true
	default:
		return false
	}
}

// ranRuns are the observed commands that started, in order of start.
func (o *observer) ranRuns() []*obsRun {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*obsRun
	for _, r := range o.all {
		if r.hasStarted() {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].startAt.Before(out[j].startAt) })
	return out
}

// maxConcurrent is the most observed commands alive at one instant (a
// command that has not ended counts as alive until now), and a
// description of that instant.
func (o *observer) maxConcurrent() (int, string) {
	type ev struct {
		at    time.Time
		delta int
		r     *obsRun
	}
	var evs []ev
	now := time.Now()
	ends := map[*obsRun]time.Time{}
	for _, r := range o.ranRuns() {
		end := now
		if r.isDone() {
			end = r.endAt
		}
		ends[r] = end
		evs = append(evs, ev{r.startAt, +1, r}, ev{end, -1, r})
	}
	// Ends sort before starts at the same instant.
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].delta < evs[j].delta
	})
	n, best, desc := 0, 0, ""
	alive := map[*obsRun]bool{}
	for _, e := range evs {
		n += e.delta
		if e.delta > 0 {
			alive[e.r] = true
		} else {
			delete(alive, e.r)
		}
		if n > best {
			best = n
			var names []string
			for r := range alive {
				names = append(names, fmt.Sprintf("%s(%s %s %s..%s)", r.label, r.host, r.runID,
					r.startAt.Format("15:04:05.000000"), ends[r].Format("15:04:05.000000")))
			}
			sort.Strings(names)
			desc = fmt.Sprintf("at %s: %s", e.at.Format("15:04:05.000000"), strings.Join(names, ", "))
		}
	}
	return best, desc
}

// cleanup kills what is left of every observed command (proven to be the
// run's own: CREW_RUN_ID in its environment), then unblocks the readers of
// FIFOs no command opened, then waits for every reader.
func (o *observer) cleanup() {
	o.mu.Lock()
	all := slices.Clone(o.all)
	o.mu.Unlock()
	// A command whose gate the clean-up just opened ends by itself.
	grace := time.After(500 * time.Millisecond)
	for _, r := range all {
		if r.hasStarted() {
			select {
			case <-r.done:
			case <-grace:
			}
		}
	}
	for _, r := range all {
		if !r.hasStarted() || r.isDone() || r.runID == "" {
			continue
		}
		id := runIdentity(r.runID)
		p, err := proveProc(r.pid, id)
		if err != nil {
			if !errors.Is(err, errGone) {
				o.t.Logf("clean-up: observed command %s pid %d: %v", r.label, r.pid, err)
			}
			continue
		}
		st, err := readStat(r.pid)
		if err == nil && p.alive() && st.pgrp > 1 {
			if g, err := proveGroup(st.pgrp, id); err == nil {
				o.t.Logf("clean-up: killing process group %d of observed command %s (run %s)", st.pgrp, r.label, r.runID)
				_ = g.signal(syscall.SIGKILL)
				g.release()
			}
		}
		if p.alive() {
			_ = p.signal(syscall.SIGKILL)
		}
		p.release()
	}
	for _, r := range all {
		if r.hasStarted() || r.isDone() {
			continue
		}
		// A reader blocked in open(2) waits for a writer: be one, briefly.
		if fd, err := syscall.Open(r.fifo, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0); err == nil {
			syscall.Close(fd)
		}
	}
	for _, r := range all {
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			// An orphaned grandchild (a sleep of at most 20 ms, or a
			// process that escaped its group) may still hold the FIFO.
			o.t.Logf("clean-up: observed command %s (run %s): its FIFO is still open", r.label, r.runID)
		}
	}
}
