package dispatch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/supervise"
	"github.com/crew-dev/crew/internal/vocab"
)

// A fire-and-forget queue: crew start --detach --wait that is not admitted
// at once joins the queue (inside the admission lock, as every waiting
// start does) and returns; a background waiter of its own, crew itself as
// `crew __wait`, waits in its place, in its own session, and once
// admitted supervises the run as a detached supervisor does. The place in
// line is handed over as a detached run's locks are (the store's
// Waiter.HandOver, descriptors inherited from fd 3 on, Adopter.AdoptWaiter),
// so that it is held by a living process at every instant, and goes when
// the background waiter dies.

// BackgroundCommand is the hidden crew subcommand a background waiter runs
// as.
const BackgroundCommand = "__wait"

// maxRequestBytes bounds what a background waiter reads of its request: a
// command line is bounded by the system far below it.
const maxRequestBytes = 64 << 20

// queued is a start that joined the queue and came back at once (admit
// with handOff): its place in line and its standing with the store, for
// a background waiter to take over.
type queued struct {
	st       backend.Starter
	w        backend.Waiter
	progress vocab.WaitProgress
	// waited is how long the start had waited when it came back: its
	// --wait=D counts from its first attempt.
	waited time.Duration
}

// toBackground hands a start that joined the queue (q) to a background
// waiter and returns once that waiter holds the place in line: only then
// does this process let go of it. A start a stop signal (sig) reached as
// it joined leaves the queue instead, as a foreground waiter does; so does
// one whose background waiter could not take over.
func (q *queued) toBackground(d *Dispatcher, req vocab.StartRequest, sig syscall.Signal) error {
	if sig != 0 {
		q.leave(d)
		return &vocab.SignalledError{Signal: sig}
	}
	if err := startBackgroundWaiter(q, req); err != nil {
		q.leave(d)
		return fmt.Errorf("hand the waiting start %s to a background waiter: %w", q.w.ID(), err)
	}
	failpoint.Hit(failpoint.WaiterHandover)
	q.w.Release()
	q.st.Close()
	if req.OnQueued != nil {
		req.OnQueued(q.progress)
	}
	return nil
}

// leave takes a queued start out of line, and wakes whoever may go now.
func (q *queued) leave(d *Dispatcher) {
	q.w.Remove()
	q.st.Close()
	d.RingWaiters()
}

// backgroundRequest is what a background waiter is told of its start (as
// JSON, on a pipe): the request, as far as it outlives crew start.
type backgroundRequest struct {
	Task        string        `json:"task"`
	Command     []string      `json:"command"`
	Dir         string        `json:"dir"`
	Pool        string        `json:"pool,omitempty"`
	LockTimeout time.Duration `json:"lockTimeout"`
	WaitTimeout time.Duration `json:"waitTimeout,omitempty"`
	Waited      time.Duration `json:"waited"`
	LogMax      int64         `json:"logMax,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	Retries     int           `json:"retries,omitempty"`
	RetryDelay  time.Duration `json:"retryDelay,omitempty"`
	Parent      record.RunID  `json:"parent,omitempty"`
	Labels      record.Labels `json:"labels,omitempty"`
	Grace       time.Duration `json:"grace"`
}

func backgroundRequestOf(req vocab.StartRequest, waited time.Duration) backgroundRequest {
	r := req.AdmitRequest
	return backgroundRequest{Task: r.Task, Command: r.Command, Dir: r.Dir, Pool: r.Pool, LockTimeout: r.LockTimeout,
		WaitTimeout: r.WaitTimeout, Waited: waited, LogMax: r.LogMax, Timeout: r.Timeout, Retries: r.Retries,
		RetryDelay: r.RetryDelay, Parent: r.Parent, Labels: r.Labels, Grace: req.Grace}
}

// admitRequest is the request the background waiter admits with.
func (b backgroundRequest) admitRequest() vocab.AdmitRequest {
	return vocab.AdmitRequest{Task: b.Task, Command: b.Command, Dir: b.Dir, Pool: b.Pool, LockTimeout: b.LockTimeout,
		Wait: true, WaitTimeout: b.WaitTimeout, LogMax: b.LogMax, Timeout: b.Timeout, Retries: b.Retries,
		RetryDelay: b.RetryDelay, Parent: b.Parent, Labels: b.Labels}
}

// startBackgroundWaiter starts crew __wait with the place in line handed
// over (descriptors from fd 3 on, then the request's pipe and the ready
// pipe), in a session of its own so that it survives the terminal, and
// returns once it says it holds the place, or why it cannot.
func startBackgroundWaiter(q *queued, req vocab.StartRequest) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find crew's own executable: %w", err)
	}
	body, err := json.Marshal(backgroundRequestOf(req, q.waited))
	if err != nil {
		return err
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("create the request pipe: %w", err)
	}
	defer reqW.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		return fmt.Errorf("create the handover pipe: %w", err)
	}
	defer readyR.Close()
	h := q.w.HandOver()
	argv := append(append([]string{exe, BackgroundCommand}, h.Store...), "--files", strconv.Itoa(len(h.Files)))
	for _, v := range h.Adopt {
		argv = append(argv, "--adopt", v)
	}
	argv = append(append(argv, req.WaiterArgs...), string(q.w.ID()))
	err = supervise.ForkDetached(argv, req.Dir, req.Env, append(h.Files, reqR, readyW))
	reqR.Close()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start crew %s: %w", BackgroundCommand, err)
	}
	// A child that died before reading it is told by the ready pipe.
	_, _ = reqW.Write(body)
	reqW.Close()
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	return backgroundAnswer(strings.TrimSpace(line))
}

// backgroundAnswer turns the background waiter's one line into the
// handover's result.
func backgroundAnswer(line string) error {
	switch {
	case line == "waiting":
		return nil
	case strings.HasPrefix(line, "error "):
		return errors.New(strings.TrimPrefix(line, "error "))
	}
	return errors.New("the background waiter exited before it took over the place in line")
}

// Background is a background waiter's side of the handover: what it was
// started with.
type Background struct {
	ID     record.RunID
	Values []string // the store's own (HandOver.Adopt)
	files  []*os.File
	req    *os.File // the start's request, then end of file
	ready  *os.File // tells the parent "waiting", or why not
	// ExitCode is the exit code crew start gives an error (cmd/crew's
	// one mapping), for the record of a start that never ran.
	ExitCode func(error) int
}

// Inherit takes what a background waiter was started with: n of the
// store's descriptors from fd 3 on, then the request pipe and the ready
// pipe. Inherited descriptors are not close-on-exec: they are made so, and
// the command inherits only what its run's claim gives it (a command that
// held a waiter's lock would keep a place in line nobody waits in).
func Inherit(id record.RunID, values []string, n int, exitCode func(error) int) *Background {
	b := &Background{ID: id, Values: values, ExitCode: exitCode}
	file := func(fd int, name string) *os.File {
		unix.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), name)
	}
	for i := range n {
		b.files = append(b.files, file(3+i, fmt.Sprintf("handed-over-%d", i)))
	}
	b.req = file(3+n, "request")
	b.ready = file(4+n, "ready")
	return b
}

// Refuse tells the parent why this waiter cannot take over; the parent's
// start then leaves the queue and says so.
func (b *Background) Refuse(err error) { b.tell("error " + strings.ReplaceAll(err.Error(), "\n", " ")) }

func (b *Background) tell(line string) {
	if b.ready == nil {
		return
	}
	_, _ = b.ready.WriteString(line + "\n")
	_ = b.ready.Close()
	b.ready = nil
}

// Wait is the background waiter (crew __wait): it takes over
// the place in line its parent handed on, waits in it as a foreground
// start with --wait does (the same loop, the same --wait=D, crew stop by a
// stop request), and once admitted supervises the run as a detached
// supervisor does: output to the run's log only, stdin /dev/null. A start
// that leaves the queue without a run leaves a record that says why, for
// crew wait: nobody else is there to be told.
func (b *Background) Wait(d *Dispatcher, signals <-chan os.Signal) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		b.Refuse(err)
		return err
	}
	defer devnull.Close()
	a, w, grace, err := b.takeOver(d)
	if err != nil {
		b.Refuse(err)
		return err
	}
	b.tell("waiting")
	var res *Reservation
	sig := WatchStopSignals(signals, func(ctx context.Context) { res, err = a.admitWaiting(ctx, w) })
	if res == nil {
		return a.leaveUnadmitted(w, sig, err, b.ExitCode)
	}
	res.Starter = a.st
	defer a.st.Close()
	failpoint.Hit(failpoint.Admitted)
	return res.supervise(d, vocab.StartRequest{AdmitRequest: a.req, Grace: grace, Stdin: devnull,
		Env: os.Environ(), Signals: signals, NoPTY: true}, sig)
}

// takeOver reads the start's request and adopts its place in line.
func (b *Background) takeOver(d *Dispatcher) (*admitter, backend.Waiter, time.Duration, error) {
	var breq backgroundRequest
	err := json.NewDecoder(io.LimitReader(b.req, maxRequestBytes)).Decode(&breq)
	b.req.Close()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("read the request of the waiting start %s: %w", b.ID, err)
	}
	adopter, ok := d.Store.(backend.Adopter)
	if !ok {
		return nil, nil, 0, fmt.Errorf("%s cannot hand a waiting start to a background waiter", d.Store.Where())
	}
	st, w, err := adopter.AdoptWaiter(b.ID, b.Values, b.files)
	if err != nil {
		return nil, nil, 0, err
	}
	return &admitter{d: d, st: st, req: breq.admitRequest(), keep: true, waited: breq.Waited}, w, breq.Grace, nil
}

// leaveUnadmitted ends a background waiter whose start was not admitted
// (err; or a stop signal, sig, ended its wait): it leaves the queue with
// the record of a start that never ran, saying how it ended, with the
// exit code the start would have exited with in the foreground.
func (a *admitter) leaveUnadmitted(w backend.Waiter, sig syscall.Signal, err error, code func(error) int) error {
	if sig != 0 {
		err = &vocab.SignalledError{Signal: sig}
	}
	if err == nil {
		err = errors.New("left the queue without being admitted")
	}
	if lerr := w.LeaveWith(a.neverRan(w.ID(), err, code)); lerr != nil {
		w.Remove() // nowhere to say why: crew wait says it left the queue
	}
	a.st.Close()
	a.d.RingWaiters()
	return err
}

// neverRan is the final record of a start that left the queue without a
// run: stopped (by crew stop, or a signal), or failed (its --wait=D ran
// out, or crew could not go on), with the exit code the start would have
// had.
func (a *admitter) neverRan(id record.RunID, err error, code func(error) int) *record.Run {
	d, req := a.d, a.req
	queuedAt, _ := id.CreatedAt()
	state, signal := record.Failed, ""
	var stopped *vocab.SignalledError
	if errors.As(err, &stopped) {
		state, signal = record.Stopped, vocab.SignalName(stopped.Signal)
	}
	rec := &record.Run{RunID: id, Task: req.Task, Command: req.Command, Dir: req.Dir, Labels: req.Labels,
		Host: d.Host, SupervisorPID: os.Getpid(), Pool: req.Pool, Parent: req.Parent,
		Timeout: record.Duration(req.Timeout), Retries: req.Retries, Signal: signal}
	if req.Retries > 0 {
		rec.RetryDelay = record.Duration(req.RetryDelay)
	}
	return unadmitted(rec, queuedAt, d.now(), state, code(err), err.Error())
}

// unadmitted completes rec (the start's own fields) into the final record
// of a start that left the line without a run: what every such record
// says, whoever writes it (the start itself, neverRan; the admission that
// finds its waiter dead, recordDeadWaiter).
func unadmitted(rec *record.Run, queuedAt, now time.Time, state record.State, exit int, reason string) *record.Run {
	rec.Version, rec.CreatedAt, rec.QueuedAt, rec.NeverAdmitted = record.RecordVersion, queuedAt, &queuedAt, true
	rec.AddEvent(queuedAt, "joined the queue")
	rec.Finish(state, now, &exit, reason)
	return rec
}
