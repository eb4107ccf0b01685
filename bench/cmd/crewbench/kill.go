package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The next waiter after a SIGKILL: cap 1, a holder runs, one
// `crew start --wait` waits behind it; the holder's supervisor and its
// command are killed with SIGKILL, and the time until the waiter's command
// starts is read from the observer file that command writes itself. The
// same with flock(1) (`flock F ...` holding, `flock F ...` waiting),
// alternating. The harness signals only its own children: the supervisor
// (crew, or flock) is one; the command is `crewbench victim`, which kills
// itself with SIGKILL when the harness opens its control FIFO.

// victimMain is `crewbench victim OBSERVER FIFO`: it appends its start to
// OBSERVER (as observe does), blocks opening FIFO until the harness opens
// its write end, then kills itself with SIGKILL.
func victimMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crewbench victim OBSERVER FIFO")
		return 2
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench victim:", err)
		return 1
	}
	if _, err := fmt.Fprintf(f, "S %d %d\n", monoNow(), os.Getpid()); err != nil {
		return 1
	}
	f.Close()
	ctl, err := os.OpenFile(args[1], os.O_RDONLY, 0) // blocks until the harness opens it
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench victim:", err)
		return 1
	}
	ctl.Close()
	_ = unix.Kill(os.Getpid(), unix.SIGKILL)
	return 1 // not reached
}

// killRep is one repetition's files and processes.
type killRep struct {
	dir, holderObs, waiterObs, fifo string
	holder, waiter                  *exec.Cmd
}

func (h killScenario) scenarioKill() error {
	r := &h.rep
	r.heading(2, "The next waiter's start after the holder is SIGKILLed")
	wait, ok, why := queueScenario(h).waitFlag()
	if !ok {
		h.notMeasured(figKill, "no `--wait` in this crew")
		r.note("Skipped: " + why + ".")
		return nil
	}
	root := h.path("roots", "kill")
	if err := h.initRoot(root, 1); err != nil {
		return err
	}
	flock := h.peers["flock"].bin
	reps := h.cfg.n(20, 5)
	h.progress("kill: %d repetitions, crew%s", reps, map[bool]string{true: " and flock alternating", false: ""}[flock != ""])
	var crewLat, flockLat []time.Duration
	for i := range reps {
		d, err := h.killCrew(root, wait, i)
		if err != nil {
			return fmt.Errorf("crew, repetition %d: %w", i+1, err)
		}
		crewLat = append(crewLat, d)
		if flock == "" {
			continue
		}
		if d, err = h.killFlock(flock, i); err != nil {
			return fmt.Errorf("flock, repetition %d: %w", i+1, err)
		}
		flockLat = append(flockLat, d)
	}
	// The killed runs are crew's to finalize; none may be left active.
	if _, err := output(h.env, h.crew, "--root", root, "recover", "--timeout", "1m"); err != nil {
		return err
	}
	if err := h.expectIdle(root); err != nil {
		return err
	}
	h.reportKill(wait, crewLat, flockLat)
	return nil
}

func (h killScenario) reportKill(wait string, crewLat, flockLat []time.Duration) {
	row := func(what string, ds []time.Duration) []string {
		return []string{what, fmt.Sprint(len(ds)), ms(percentile(ds, 50)), ms(percentile(ds, 99)), ms(slices.Max(ds))}
	}
	rows := [][]string{row("`crew start "+wait+" w -- observe` behind `crew start hold -- victim` (cap 1)", crewLat)}
	flockNote := "flock is not installed"
	if len(flockLat) > 0 {
		rows = append(rows, row("`flock F observe` behind `flock F victim`", flockLat))
		flockNote = "flock " + ms(percentile(flockLat, 50)) + " p50"
	}
	p99 := percentile(crewLat, 99)
	h.rep.table([]string{"waiter", "repetitions", "p50", "p99", "max"}, rows)
	h.rep.para("Each repetition: the holder's command (`crewbench victim`) records its start, then the waiter is started and awaited in line (`crew status --json` shows it queued; for flock, blocked in flock(2)). The harness kills the holder's supervisor (its own child) with SIGKILL and opens the victim's control FIFO, on which the victim kills itself with SIGKILL; the time runs from there to the start the waiter's command (`crewbench observe`) wrote itself (CLOCK_MONOTONIC). After the last repetition `crew recover` finalizes the killed runs, and none may be left active.")
	h.measured(figKill, fmt.Sprintf("p50 %s, p99 **%s**, max %s (%s)", ms(percentile(crewLat, 50)), ms(p99), ms(slices.Max(crewLat)), flockNote),
		fmt.Sprintf("%d repetitions", len(crewLat)), p99 <= 50*time.Millisecond)
}

// newKillRep makes one repetition's directory, observer paths and FIFO.
func (h killScenario) newKillRep(label string, i int) (*killRep, error) {
	k := &killRep{dir: h.path("kill", fmt.Sprintf("%s-%d", label, i))}
	k.holderObs, k.waiterObs, k.fifo = k.dir+"/holder.obs", k.dir+"/waiter.obs", k.dir+"/victim.fifo"
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return nil, fmt.Errorf("kill: %w", err)
	}
	if err := syscall.Mkfifo(k.fifo, 0o600); err != nil {
		return nil, fmt.Errorf("kill: mkfifo: %w", err)
	}
	return k, nil
}

// killCrew is one crew repetition: the latency from the kill to the
// waiter's command start.
func (h killScenario) killCrew(root, wait string, i int) (time.Duration, error) {
	k, err := h.newKillRep("crew", i)
	if err != nil {
		return 0, err
	}
	holder := []string{h.crew, "--root", root, "start", fmt.Sprintf("hold-%d", i), "--", h.self, "victim", k.holderObs, k.fifo}
	waiter := []string{h.crew, "--root", root, "start", wait, fmt.Sprintf("w-%d", i), "--", h.self, "observe", k.waiterObs, "0"}
	queued := func() error {
		_, err := h.awaitStatus(root, 30*time.Second, func(s *statusSnapshot) bool { return len(s.Queue) == 1 })
		return err
	}
	return h.killRepetition(k, holder, waiter, queued)
}

// killFlock is the same repetition with flock(1) holding and waiting.
func (h killScenario) killFlock(flock string, i int) (time.Duration, error) {
	k, err := h.newKillRep("flock", i)
	if err != nil {
		return 0, err
	}
	lock := filepath.Join(k.dir, "flock.lock")
	holder := []string{flock, lock, h.self, "victim", k.holderObs, k.fifo}
	waiter := []string{flock, lock, h.self, "observe", k.waiterObs, "0"}
	blocked := func() error { return awaitBlockedInFlock(k.waiter.Process.Pid, 30*time.Second) }
	return h.killRepetition(k, holder, waiter, blocked)
}

// killRepetition starts the holder, waits for its command, starts the
// waiter and waits until inLine says it waits, kills both parts of the
// holder, and returns the time until the waiter's command started.
// Both processes it starts are reaped before it returns.
func (h killScenario) killRepetition(k *killRep, holderArgs, waiterArgs []string, inLine func() error) (time.Duration, error) {
	stderr, err := os.Create(k.dir + "/stderr")
	if err != nil {
		return 0, err
	}
	defer stderr.Close()
	start := func(args []string) (*exec.Cmd, error) {
		c := exec.Command(args[0], args[1:]...)
		c.Env, c.Stderr = h.env, stderr
		return c, c.Start()
	}
	if k.holder, err = start(holderArgs); err != nil {
		return 0, err
	}
	defer reapOrKill(k.holder)
	// On any way out, the victim (not the harness's child) is told to
	// kill itself, so nothing is left blocked on its FIFO.
	h.atCleanup(func() { _ = releaseVictim(k.fifo, 0) })
	defer func() { _ = releaseVictim(k.fifo, 0) }()
	if _, err := awaitObserved(k.holderObs, 30*time.Second); err != nil {
		return 0, fmt.Errorf("holder's command: %w: %s", err, tailFile(k.dir+"/stderr"))
	}
	if k.waiter, err = start(waiterArgs); err != nil {
		return 0, err
	}
	defer reapOrKill(k.waiter)
	if err := inLine(); err != nil {
		return 0, fmt.Errorf("waiter in line: %w", err)
	}
	if err := k.holder.Process.Kill(); err != nil {
		return 0, fmt.Errorf("SIGKILL the holder: %w", err)
	}
	if err := releaseVictim(k.fifo, 5*time.Second); err != nil {
		return 0, err
	}
	killed := monoNow()
	started, err := awaitObserved(k.waiterObs, 90*time.Second)
	if err != nil {
		return 0, fmt.Errorf("waiter's command after the kill: %w: %s", err, tailFile(k.dir+"/stderr"))
	}
	if err := k.waiter.Wait(); err != nil {
		return 0, fmt.Errorf("waiter: %w: %s", err, tailFile(k.dir+"/stderr"))
	}
	return time.Duration(started - killed), nil
}

// releaseVictim opens the victim's FIFO for writing, which makes it kill
// itself; it retries (for at most limit) while the victim has not opened
// its end yet, and fails when no victim is there.
func releaseVictim(fifo string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			return f.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("release the victim through %s: %w", fifo, err)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// reapOrKill reaps a child of the harness, killing it first if it is
// still running (a repetition that failed half-way).
func reapOrKill(c *exec.Cmd) {
	if c.ProcessState != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// awaitObserved waits until an observer file has a start line and
// returns its time (CLOCK_MONOTONIC ns).
func awaitObserved(path string, limit time.Duration) (int64, error) {
	deadline := time.Now().Add(limit)
	for {
		if t, ok := firstStart(path); ok {
			return t, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no start in %s within %s", path, limit)
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// firstStart is the time of the first start line of an observer file.
func firstStart(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[0] == "S" {
			t, err := strconv.ParseInt(fs[1], 10, 64)
			return t, err == nil
		}
	}
	return 0, false
}

// awaitBlockedInFlock waits until pid sleeps in flock(2): its wait
// channel names a lock wait, or (amd64) its current syscall is flock.
func awaitBlockedInFlock(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if strings.Contains(string(wchan), "lock") || runtime.GOARCH == "amd64" && strings.HasPrefix(string(sc), "73 ") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not blocked in flock(2) within %s (wchan %q)", pid, limit, wchan)
		}
		time.Sleep(time.Millisecond)
	}
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	return tail(b, 400)
}
