package leaseguard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/crew-dev/crew/internal/failpoint"
)

// ErrGone: the guard has exited, so it no longer enforces anything, and its
// group must not be signalled any more. If the command was in its group, it
// was (or is being) killed.
var ErrGone = errors.New("the lease guard has exited")

// Timeouts of the supervisor's side; variables so that tests could shorten
// them.
var (
	startTimeout = 10 * time.Second // Start waits this long for codeReady
	writeTimeout = 2 * time.Second  // a message write (the pipe is full: guard stopped)
	replyTimeout = 5 * time.Second  // Confirm waits this long for codePong
	endTimeout   = 10 * time.Second // End waits this long for the guard to exit
)

// Options for Start.
type Options struct {
	// Exe and Args run the guard: crew re-executes itself as
	// os.Executable() with Args = []string{"__lease-guard"}, and its main
	// then calls Main. The guard's argv is Exe followed by Args.
	Exe  string
	Args []string
	// Env is the guard's environment; nil: this process's.
	Env []string
	// Deadline is the first deadline (Monotonic time); it must be in the
	// future.
	Deadline time.Duration
	// Stderr is the guard's stderr, where it explains a kill; nil:
	// os.Stderr.
	Stderr *os.File
}

// Guard is a running guard process, from the supervisor's side. Its methods
// are safe for concurrent use.
type Guard struct {
	pid  int
	proc *os.Process
	in   *os.File // write end of the guard's stdin
	out  *os.File // read end of the guard's stdout; only the reaper reads it

	ready chan struct{} // closed at codeReady
	pong  chan struct{} // one value per codePong
	done  chan struct{} // closed once the guard is reaped

	wmu   sync.Mutex // serialises messages, and Confirm's round trip
	ended bool       // End sent end and closed in (under wmu)

	mu     sync.Mutex
	exited bool // the guard closed its stdout: it exited (and may be reaped soon)
	reason byte // the last code other than ready and pong (under mu)

	state   *os.ProcessState // set before done is closed
	waitErr error

	endOnce sync.Once
	endErr  error
}

// Start starts the guard as the leader of a new process group and returns
// once it runs, ignores the signals meant for the command, and has the first
// deadline. The caller then starts the command with SysProcAttr{Setpgid:
// true, Pgid: g.Pgid()}, and should call Confirm after that (see Confirm).
//
// The guard gets no Pdeathsig: it must outlive the supervisor, to kill the
// group when the supervisor dies.
func Start(o Options) (*Guard, error) {
	if o.Exe == "" {
		return nil, errors.New("leaseguard: no executable for the lease guard")
	}
	if now := Monotonic(); o.Deadline <= now {
		return nil, fmt.Errorf("leaseguard: the first deadline is not in the future (it passed %v ago)", now-o.Deadline)
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	// os.Pipe opens both ends close-on-exec: neither the command nor any
	// other child of this process inherits them, so the guard's stdin
	// reaches EOF exactly when this process's write end closes (it exits),
	// and its stdout reaches EOF exactly when the guard exits.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("leaseguard: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("leaseguard: %w", err)
	}
	proc, err := os.StartProcess(o.Exe, append([]string{o.Exe}, o.Args...), &os.ProcAttr{
		Env:   o.Env,
		Files: []*os.File{inR, outW, stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("leaseguard: starting the lease guard %s: %w", o.Exe, err)
	}
	g := &Guard{
		pid:   proc.Pid,
		proc:  proc,
		in:    inW,
		out:   outR,
		ready: make(chan struct{}),
		pong:  make(chan struct{}, 16),
		done:  make(chan struct{}),
	}
	go g.reap()
	// The first deadline fits in the empty pipe: this does not block.
	werr := g.send(int64(o.Deadline))
	var fail error
	select {
	case <-g.ready:
		return g, nil
	case <-g.done:
		fail = fmt.Errorf("it exited (%v) before it was ready", g.state)
		if werr != nil {
			fail = fmt.Errorf("%w; sending the first deadline: %v", fail, werr)
		}
	case <-time.After(startTimeout):
		// Our own unreaped child (os.Process knows when it was reaped),
		// alone in its group: nothing else was started into it.
		_ = proc.Kill()
		<-g.done
		fail = fmt.Errorf("it was not ready within %v; killed it", startTimeout)
	}
	g.in.Close()
	return nil, fmt.Errorf("leaseguard: starting the lease guard %s (pid %d): %w", o.Exe, g.pid, fail)
}

// reap reads the guard's stdout until EOF, which comes when the guard has
// exited (nobody else holds the write end), marks it exited, and only then
// reaps it: so while Alive is true, the guard is unreaped and its pid, the
// group's id, cannot belong to anyone else.
func (g *Guard) reap() {
	buf := make([]byte, 64)
	readyClosed := false
	for {
		n, err := g.out.Read(buf)
		for _, b := range buf[:n] {
			switch b {
			case codeReady:
				if !readyClosed {
					close(g.ready)
					readyClosed = true
				}
			case codePong:
				select {
				case g.pong <- struct{}{}:
				default:
				}
			default:
				g.mu.Lock()
				g.reason = b
				g.mu.Unlock()
			}
		}
		if err != nil {
			break // EOF: the guard exited (any other error: act as if)
		}
	}
	g.mu.Lock()
	g.exited = true
	g.mu.Unlock()
	g.out.Close()
	failpoint.Hit(failpoint.GuardExited)
	g.state, g.waitErr = g.proc.Wait()
	close(g.done)
}

// Pgid is the guard's process group, which it leads: the group to start the
// command into. It equals PID.
func (g *Guard) Pgid() int { return g.pid }

// PID is the guard's process id.
func (g *Guard) PID() int { return g.pid }

// Alive reports whether the guard has not exited yet, as far as this process
// has seen. While it is true the guard is unreaped, so its group's id is not
// anyone else's; but the guard may exit at any moment, so to signal the group
// use Signal, which checks and signals atomically with respect to reaping.
func (g *Guard) Alive() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.exited
}

// Signal sends sig to the guard's whole process group (the command and its
// descendants that stayed in it; the guard ignores the stop signals), or
// returns an error wrapping ErrGone, sending nothing, once the guard has
// exited. It holds off reaping while it signals, so the group it signals is
// provably the run's own.
func (g *Guard) Signal(sig syscall.Signal) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exited {
		return g.goneLocked()
	}
	if err := syscall.Kill(-g.pid, sig); err != nil {
		return fmt.Errorf("leaseguard: signalling process group %d: %w", g.pid, err)
	}
	return nil
}

// Extend moves the deadline forward (Monotonic time); a deadline before the
// current one is ignored by the guard. It returns an error once the guard is
// gone (wrapping ErrGone) or cannot take the message: the caller then knows
// its command is being or was killed, or is no longer guarded. A nil error
// means the message is in the pipe, not that the guard has read it.
func (g *Guard) Extend(deadline time.Duration) error {
	if deadline <= 0 {
		return fmt.Errorf("leaseguard: invalid deadline %d", deadline)
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return g.sendLocked(int64(deadline))
}

// Confirm asks the guard to answer, and returns nil once it has: the guard
// was alive and not yet killing after every process started into its group
// before the call, so it will kill them when it kills. Call it after
// starting the command: if the guard died just before the command joined
// its group (which a dead but unreaped leader allows), Confirm fails, and
// the caller must kill the command's group itself (the command, its own
// unreaped child in that group, pins the group's id) and give the run up.
// It also fails if the guard does not answer within a few seconds (stopped).
func (g *Guard) Confirm() error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	for len(g.pong) > 0 { // a late answer to an earlier, timed-out Confirm
		<-g.pong
	}
	if err := g.sendLocked(msgPing); err != nil {
		return err
	}
	select {
	case <-g.pong:
		return nil
	case <-g.done:
		return g.gone()
	case <-time.After(replyTimeout):
		return fmt.Errorf("leaseguard: the lease guard (pid %d) did not answer within %v (stopped?)", g.pid, replyTimeout)
	}
}

// End says the run is over: the guard kills whatever is left in its group,
// itself included. End waits for the guard and reaps it, and returns nil if
// it ended that way; otherwise an error that says why it ended (its deadline
// passed, for example: then the command was killed by the guard). If the
// guard does not exit within endTimeout (someone stopped it), End kills the
// group itself. After End, Pgid must not be signalled any more. Calling End
// again returns the same result.
func (g *Guard) End() error {
	g.endOnce.Do(func() { g.endErr = g.end() })
	return g.endErr
}

func (g *Guard) end() error {
	g.wmu.Lock()
	sendErr := g.sendLocked(msgEnd)
	g.ended = true
	g.in.Close()
	g.wmu.Unlock()

	select {
	case <-g.done:
	case <-time.After(endTimeout):
		err := g.Signal(syscall.SIGKILL)
		<-g.done
		if err != nil {
			return fmt.Errorf("leaseguard: the lease guard (pid %d) did not end within %v; killing its group: %v", g.pid, endTimeout, err)
		}
		return fmt.Errorf("leaseguard: the lease guard (pid %d) did not end within %v; killed its process group", g.pid, endTimeout)
	}
	g.mu.Lock()
	reason := g.reason
	g.mu.Unlock()
	if reason == codeEnd && g.waitErr == nil && killedBy(g.state, syscall.SIGKILL) {
		return nil
	}
	err := g.gone()
	if sendErr != nil && reason == codeEnd {
		err = fmt.Errorf("%w (sending end: %v)", err, sendErr)
	}
	return err
}

func (g *Guard) send(v int64) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return g.sendLocked(v)
}

// sendLocked writes one message; wmu is held.
func (g *Guard) sendLocked(v int64) error {
	if g.ended {
		return fmt.Errorf("leaseguard: the run was ended: %w", ErrGone)
	}
	if !g.Alive() {
		return g.gone()
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	// The pipe is the guard's only input: if it is full, the guard has
	// not read for thousands of messages (stopped); do not hang with it.
	_ = g.in.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := g.in.Write(b[:]); err != nil {
		if !g.Alive() || errors.Is(err, syscall.EPIPE) {
			return fmt.Errorf("%w (%v)", g.gone(), err)
		}
		return fmt.Errorf("leaseguard: writing to the lease guard (pid %d): %w", g.pid, err)
	}
	return nil
}

func (g *Guard) gone() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.goneLocked()
}

// goneLocked describes why the guard exited, as far as it said; mu is held.
func (g *Guard) goneLocked() error {
	why := "it exited"
	switch g.reason {
	case codeEnd:
		why = "it ended the run and killed its process group"
	case codeDeadline:
		why = "its deadline passed; it killed the run's process group"
	case codeEOF:
		why = "it saw the supervisor's end of its pipe close; it killed the run's process group"
	case codeInvalid:
		why = "it got an invalid message; it killed the run's process group"
	}
	return fmt.Errorf("leaseguard: lease guard (pid %d): %s: %w", g.pid, why, ErrGone)
}

func killedBy(st *os.ProcessState, sig syscall.Signal) bool {
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
