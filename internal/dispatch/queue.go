package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/runstore"
)

// WaitReason says what a queued run is waiting for.
type WaitReason string

const (
	WaitSlot WaitReason = "slot" // the global cap
	WaitPool WaitReason = "pool" // its pool's cap
	WaitTask WaitReason = "task" // its task's active run, or an older waiting start of the task
)

// pollInterval is the fallback re-evaluation of a waiter, for changes no
// one rang about: a run or waiter killed with SIGKILL frees its place
// without any file changing. Jittered so waiters do not poll in step.
const pollInterval = 2 * time.Second

// queuedTicket is a ticket as admission sees it.
type queuedTicket struct {
	id    runstore.RunID
	task  string
	pool  string
	since time.Time
	alive bool
}

func liveTickets(q []queuedTicket) []queuedTicket {
	return slices.DeleteFunc(slices.Clone(q), func(t queuedTicket) bool { return !t.alive })
}

// scanQueue reads the queue in arrival order and probes each waiter's
// lock. With clean (inside the admission lock), dead waiters' tickets are
// removed; without, they are only marked dead.
func (d *Dispatcher) scanQueue(clean bool) []queuedTicket {
	st := d.Store
	entries, err := st.ListTickets()
	if err != nil {
		return nil
	}
	out := make([]queuedTicket, 0, len(entries))
	for _, e := range entries {
		held, err := lockfs.Probe(st.TicketLockPath(e.ID))
		alive := held || err != nil
		if !alive && clean {
			d.removeDeadTicket(e.ID)
			continue
		}
		if e.Err != nil {
			continue // unreadable: it cannot be placed in line; removed once its waiter is gone
		}
		t := e.Ticket
		out = append(out, queuedTicket{id: e.ID, task: t.Task, pool: t.Pool, since: t.CreatedAt, alive: alive})
	}
	return out
}

// removeDeadTicket removes the files of a ticket whose waiter is gone, and
// reports whether it did. A waiter removes its own ticket before its lock,
// so a free lock means the waiter is gone; taking that lock first keeps
// two cleaners from removing files under each other.
func (d *Dispatcher) removeDeadTicket(id runstore.RunID) bool {
	st := d.Store
	l, err := lockfs.TryOwner(st.TicketLockPath(id))
	switch {
	case err == nil:
		_ = os.Remove(st.TicketPath(id))
		_ = os.Remove(st.BellPath(id))
		_ = l.RemoveAndRelease()
		return true
	case errors.Is(err, lockfs.ErrGone):
		st.RemoveTicket(id)
		return true
	default:
		return false // a living waiter holds it
	}
}

// verdict is admission's decision for one candidate.
type verdict struct {
	admit          bool
	reason         WaitReason
	position       int // 1-based place in line among live tickets (newcomers: one past the end)
	ahead          int // live tickets ahead of it
	blockingRun    *ActiveRun
	blockingTicket runstore.RunID
	queueAhead     bool // a slot is free but older waiters get it first
}

// simulation hands out capacity to tickets in arrival order.
type simulation struct {
	cfg     runstore.Config
	inUse   int
	poolUse map[string]int
	runs    map[string]ActiveRun      // tasks with an active run
	claimed map[string]runstore.RunID // tasks with an older ticket in line
}

func newSimulation(cfg runstore.Config, v activeView) *simulation {
	pu := make(map[string]int, len(v.poolUse))
	for k, n := range v.poolUse {
		pu[k] = n
	}
	return &simulation{cfg: cfg, inUse: v.inUse, poolUse: pu, runs: v.byTask, claimed: map[string]runstore.RunID{}}
}

func (s *simulation) block(task, pool string) (WaitReason, *ActiveRun, runstore.RunID) {
	if h, ok := s.runs[task]; ok {
		return WaitTask, &h, ""
	}
	if id, ok := s.claimed[task]; ok {
		return WaitTask, nil, id
	}
	if s.inUse >= s.cfg.MaximumInProgress {
		return WaitSlot, nil, ""
	}
	if pool != "" {
		if limit, ok := s.cfg.Pools[pool]; ok && s.poolUse[pool] >= limit {
			return WaitPool, nil, ""
		}
	}
	return "", nil, ""
}

// visit places a ticket: it takes capacity if it can, and either way keeps
// younger tickets of its task behind it.
func (s *simulation) visit(t queuedTicket) bool {
	r, _, _ := s.block(t.task, t.pool)
	if r == "" {
		s.inUse++
		if t.pool != "" {
			s.poolUse[t.pool]++
		}
	}
	if _, ok := s.claimed[t.task]; !ok {
		s.claimed[t.task] = t.id
	}
	return r == ""
}

// decide is the queue discipline. Capacity goes to live tickets in arrival
// order; a ticket that cannot run because of its task or its pool does not
// hold up younger tickets that can (no head-of-line blocking), and the
// older of two tickets of one task goes first. A newcomer (me == "") lines
// up behind every live ticket; --force skips the line and the caps, but
// never a task's active run.
func decide(cfg runstore.Config, v activeView, queue []queuedTicket, me runstore.RunID, req AdmitRequest) verdict {
	if req.Force && me == "" {
		if h, ok := v.byTask[req.Task]; ok {
			return verdict{reason: WaitTask, blockingRun: &h}
		}
		return verdict{admit: true}
	}
	sim := newSimulation(cfg, v)
	live := liveTickets(queue)
	for i, t := range live {
		if t.id == me {
			r, run, tid := sim.block(t.task, t.pool)
			return verdict{admit: r == "", reason: r, position: i + 1, ahead: i, blockingRun: run, blockingTicket: tid}
		}
		sim.visit(t)
	}
	r, run, tid := sim.block(req.Task, req.Pool)
	vd := verdict{admit: r == "", reason: r, position: len(live) + 1, ahead: len(live), blockingRun: run, blockingTicket: tid}
	if (r == WaitSlot || r == WaitPool) && fits(cfg, v, req.Pool) {
		vd.queueAhead = true
	}
	return vd
}

// attemptResult is a start that was not admitted on this attempt.
type attemptResult struct {
	verdict  verdict
	inUse    int
	maximum  int
	poolUse  int
	poolMax  int
	holders  []ActiveRun
	warnings []string
	ticket   *waitTicket
}

func (ar *attemptResult) refusal(req AdmitRequest) *RefusedError {
	vd := ar.verdict
	e := &RefusedError{Kind: SlotsBusy, Task: req.Task, InUse: ar.inUse, Maximum: ar.maximum, Holders: ar.holders,
		Warnings: ar.warnings, Pool: req.Pool, PoolInUse: ar.poolUse, PoolMax: ar.poolMax, Ahead: vd.ahead}
	switch {
	case vd.reason == WaitTask && vd.blockingRun != nil:
		e.Kind, e.Holders = TaskActive, []ActiveRun{*vd.blockingRun}
	case vd.reason == WaitTask:
		e.Kind, e.Holders, e.OlderTicket = TaskActive, nil, vd.blockingTicket
	case vd.queueAhead:
		e.QueueAhead = true
	case vd.reason == WaitPool:
		e.PoolFull = true
	}
	return e
}

// WaitProgress tells a waiting start where it stands.
type WaitProgress struct {
	RunID     runstore.RunID
	Admitted  bool
	Position  int // 1-based place in line
	Reason    WaitReason
	InUse     int
	Maximum   int
	Pool      string
	PoolInUse int
	PoolMax   int
	// Oldest is the longest-running run holding a slot, if any.
	Oldest *ActiveRun
	// BlockingRun is the task's own active run, when that is the reason.
	BlockingRun *ActiveRun
	Since       time.Time
}

func (ar *attemptResult) progress(tk *waitTicket, req AdmitRequest) WaitProgress {
	p := WaitProgress{RunID: tk.id, Position: ar.verdict.position, Reason: ar.verdict.reason, InUse: ar.inUse,
		Maximum: ar.maximum, Pool: req.Pool, PoolInUse: ar.poolUse, PoolMax: ar.poolMax,
		BlockingRun: ar.verdict.blockingRun, Since: tk.since}
	for i := range ar.holders {
		h := ar.holders[i]
		if h.RunID != "" && (p.Oldest == nil || h.Since.Before(p.Oldest.Since)) {
			p.Oldest = &h
		}
	}
	return p
}

// waitTicket is this process's place in the queue: the ticket file, the
// lock that keeps it valid, and the bell it sleeps on.
type waitTicket struct {
	d     *Dispatcher
	id    runstore.RunID
	since time.Time
	lock  *lockfs.OwnerLock
	bell  *os.File
	rung  chan struct{}
	done  bool
}

// joinQueue creates this process's ticket; the caller holds the admission
// lock, which is what makes arrival order total. The lock and the bell
// exist before the ticket does, so a visible ticket is always valid and
// always wakeable.
func (d *Dispatcher) joinQueue(req AdmitRequest, queue []queuedTicket) (*waitTicket, error) {
	st := d.Store
	now := d.now()
	id := runstore.NewRunID(now)
	if len(queue) > 0 {
		id = runstore.NewRunIDAfter(queue[len(queue)-1].id, now)
	}
	lock, err := lockfs.CreateOwner(st.TicketLockPath(id))
	if err != nil {
		return nil, fmt.Errorf("join the queue: %w", err)
	}
	bellPath := st.BellPath(id)
	if err := unix.Mkfifo(bellPath, uint32(runstore.FilePerm)); err != nil {
		_ = lock.RemoveAndRelease()
		return nil, fmt.Errorf("join the queue: create %s: %w", bellPath, err)
	}
	// Opened for reading and writing so that it never reports end of file
	// and opening never blocks.
	bell, err := os.OpenFile(bellPath, os.O_RDWR, 0)
	if err != nil {
		_ = os.Remove(bellPath)
		_ = lock.RemoveAndRelease()
		return nil, fmt.Errorf("join the queue: open %s: %w", bellPath, err)
	}
	createdAt, _ := id.CreatedAt()
	host := d.Host
	t := &runstore.Ticket{Version: runstore.TicketVersion, RunID: id, Task: req.Task, Pool: req.Pool,
		Command: req.Command, Host: host, PID: os.Getpid(), CreatedAt: createdAt}
	if err := st.WriteTicket(t); err != nil {
		_ = bell.Close()
		_ = os.Remove(bellPath)
		_ = lock.RemoveAndRelease()
		return nil, err
	}
	tk := &waitTicket{d: d, id: id, since: createdAt, lock: lock, bell: bell, rung: make(chan struct{}, 1)}
	go tk.listen()
	return tk, nil
}

// listen turns bytes on the bell into wake-ups until the bell is closed.
func (tk *waitTicket) listen() {
	buf := make([]byte, 64)
	for {
		if _, err := tk.bell.Read(buf); err != nil {
			return
		}
		select {
		case tk.rung <- struct{}{}:
		default:
		}
	}
}

// admitted removes the ticket of a waiter that was just admitted (inside
// the admission lock): its run record carries on under the same id.
func (tk *waitTicket) admitted() {
	tk.remove()
}

// leave removes the ticket of a waiter that gives up, and wakes whoever
// may now go first.
func (tk *waitTicket) leave() {
	tk.remove()
	tk.d.RingWaiters()
}

func (tk *waitTicket) remove() {
	if tk.done {
		return
	}
	tk.done = true
	st := tk.d.Store
	_ = os.Remove(st.TicketPath(tk.id))
	_ = os.Remove(st.BellPath(tk.id))
	_ = tk.bell.Close()
	_ = tk.lock.RemoveAndRelease()
}

// admitWaiting is Admit with --wait: attempt, and while not admitted,
// sleep on the bell (rung by whoever frees a slot this waiter may take),
// with a slow poll as a fallback, until admitted, timed out or cancelled.
func (d *Dispatcher) admitWaiting(ctx context.Context, req AdmitRequest) (*Reservation, error) {
	var deadline <-chan time.Time
	if req.WaitTimeout > 0 {
		t := time.NewTimer(req.WaitTimeout)
		defer t.Stop()
		deadline = t.C
	}
	report := func(p WaitProgress) {
		if req.OnWait != nil {
			req.OnWait(p)
		}
	}
	var tk *waitTicket
	defer func() {
		if tk != nil && !tk.done {
			tk.leave()
		}
	}()
	for {
		res, ar, err := d.attempt(ctx, req, tk)
		if err != nil {
			return nil, err
		}
		if res != nil {
			if tk != nil {
				report(WaitProgress{RunID: res.Rec.RunID, Admitted: true, Since: tk.since})
			}
			return res, nil
		}
		joined := tk == nil
		tk = ar.ticket
		report(ar.progress(tk, req))
		if joined && d.evaluate(tk, req) == nil {
			// Capacity freed between our decision and our ticket becoming
			// visible was announced to nobody: whoever freed it looked
			// at a queue without us. Look once more before sleeping.
			continue
		}
		if err := d.sleepUntilWorthTrying(ctx, tk, req, deadline, report); err != nil {
			if errors.Is(err, errWaitTimeout) {
				r := ar.refusal(req)
				r.WaitedFor = req.WaitTimeout
				if latest := d.evaluate(tk, req); latest != nil {
					r = latest.refusal(req)
					r.WaitedFor = req.WaitTimeout
				}
				return nil, r
			}
			return nil, err
		}
		failpoint.Hit("queue-woken")
	}
}

var errWaitTimeout = errors.New("wait timed out")

// sleepUntilWorthTrying returns when the bell rings, or when a fallback
// poll finds that this waiter may be admitted now.
func (d *Dispatcher) sleepUntilWorthTrying(ctx context.Context, tk *waitTicket, req AdmitRequest, deadline <-chan time.Time, report func(WaitProgress)) error {
	for {
		poll := time.NewTimer(pollInterval + rand.N(pollInterval/2))
		select {
		case <-ctx.Done():
			poll.Stop()
			return ctx.Err()
		case <-deadline:
			poll.Stop()
			return errWaitTimeout
		case <-tk.rung:
			poll.Stop()
			return nil
		case <-poll.C:
			// Cheap first: as long as every slot is held by a living run,
			// nothing can have changed unannounced. Only free capacity
			// (a run that died without a word frees its slot) makes it
			// worth reading the whole queue.
			if !d.capacityLeft(req) {
				continue
			}
			ar := d.evaluate(tk, req)
			if ar == nil {
				return nil // admissible, or cannot tell: try under the lock
			}
			report(ar.progress(tk, req))
		}
	}
}

// evaluate decides for a ticket without the admission lock (read-only), to
// see whether taking the lock is worth it. It returns nil if the ticket
// looks admissible.
func (d *Dispatcher) evaluate(tk *waitTicket, req AdmitRequest) *attemptResult {
	cfg, _, err := runstore.LoadConfig(d.Store.Layout)
	if err != nil {
		return nil
	}
	view, err := d.scanActive(false, "")
	if err != nil {
		return nil
	}
	vd := decide(cfg, view, d.scanQueue(false), tk.id, req)
	if vd.admit {
		return nil
	}
	return &attemptResult{verdict: vd, inUse: view.inUse, maximum: cfg.MaximumInProgress,
		poolUse: view.poolUse[req.Pool], poolMax: cfg.Pools[req.Pool], holders: view.holders}
}

// capacityLeft reports whether a run of req's pool would fit under the
// caps right now, ignoring the queue; it reads only the active set.
func (d *Dispatcher) capacityLeft(req AdmitRequest) bool {
	cfg, _, err := runstore.LoadConfig(d.Store.Layout)
	if err != nil {
		return true // cannot tell: let the full evaluation decide
	}
	view, err := d.scanActive(false, "")
	if err != nil {
		return true
	}
	if _, busy := view.byTask[req.Task]; busy {
		return false // our task's run is alive; its end is announced
	}
	return fits(cfg, view, req.Pool)
}

// RingWaiters wakes the waiters that may be admitted now. Whoever frees
// capacity calls it (a finishing run, a waiter leaving, a reaped run, a
// raised cap); it only reads, and a waiter always re-decides under the
// admission lock, so a stale or extra ring costs one attempt, never a
// wrong admission.
func (d *Dispatcher) RingWaiters() {
	queue := d.scanQueue(false)
	live := liveTickets(queue)
	if len(live) == 0 {
		return
	}
	cfg, _, err := runstore.LoadConfig(d.Store.Layout)
	if err != nil {
		return
	}
	view, err := d.scanActive(false, "")
	if err != nil {
		return
	}
	sim := newSimulation(cfg, view)
	for _, t := range live {
		if sim.visit(t) {
			ring(d.Store.BellPath(t.id))
		}
	}
}

// ring writes a byte into a waiter's bell without ever blocking: a full
// pipe has been rung already, and a bell with no reader belongs to a dead
// waiter.
func ring(path string) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = unix.Write(fd, []byte{1})
	_ = unix.Close(fd)
}
