package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// pollInterval is the fallback re-evaluation of a waiter, for changes no
// one rang about: a run or waiter killed with SIGKILL frees its place
// without any file changing. Jittered so waiters do not poll in step.
// Where the store tells of such changes (Waiter.Changed: on Linux a state
// root's released locks and the lock of the waiter just ahead, on etcd a
// watch), nothing is known to need the poll: it is a net for what no
// test has thought of, slow enough that idle waiters cost nothing (issue
// 25: 64 idle waiters woke 138 times in 30 s for it).
const (
	pollInterval       = 2 * time.Second
	safetyPollInterval = 5 * time.Minute
)

// attemptResult is a start that was not admitted on this attempt.
type attemptResult struct {
	verdict  admission.Verdict
	cfg      record.Config
	usage    admission.Usage
	pool     string
	warnings []error
	waiter   backend.Waiter
	// configErr: crew.json is unusable, nothing was decided.
	configErr *vocab.ConfigError
	// queueErr: the queue cannot be listed, nothing was decided.
	queueErr error
}

// undecided is why nothing could be decided on this attempt, if so.
func (ar *attemptResult) undecided() error {
	if ar.configErr != nil {
		return ar.configErr
	}
	return ar.queueErr
}

func (ar *attemptResult) refusal(req vocab.AdmitRequest) *vocab.RefusedError {
	return Refusal(req.Task, req.Pool, ar.cfg, ar.usage, ar.verdict, ar.warnings)
}

// Refusal is the error for a start that verdict v does not admit: every
// backend refuses in the same words.
func Refusal(task, pool string, cfg record.Config, u admission.Usage, v admission.Verdict, warnings []error) *vocab.RefusedError {
	e := &vocab.RefusedError{Kind: vocab.SlotsBusy, Task: task, InUse: u.InUse, Maximum: cfg.MaximumInProgress,
		Holders: u.Holders, Warnings: warnings, Pool: pool, PoolInUse: u.PoolUse[pool],
		PoolMax: cfg.Pools[pool], Ahead: v.Ahead}
	switch {
	case v.Reason == admission.WaitTask && v.BlockingRun != nil:
		e.Kind, e.Holders = vocab.TaskActive, []admission.Holder{*v.BlockingRun}
	case v.Reason == admission.WaitTask:
		e.Kind, e.Holders, e.OlderTicket = vocab.TaskActive, nil, v.BlockingTicket
	case v.QueueAhead:
		e.QueueAhead = true
	case v.Reason == admission.WaitPool:
		e.PoolFull = true
	}
	return e
}

func (ar *attemptResult) progress(req vocab.AdmitRequest) vocab.WaitProgress {
	since, _ := ar.waiter.ID().CreatedAt()
	p := vocab.WaitProgress{RunID: ar.waiter.ID(), Task: req.Task, Position: ar.verdict.Position, Reason: ar.verdict.Reason,
		InUse: ar.usage.InUse, Maximum: ar.cfg.MaximumInProgress, Pool: req.Pool,
		PoolInUse: ar.usage.PoolUse[req.Pool], PoolMax: ar.cfg.Pools[req.Pool],
		BlockingRun: ar.verdict.BlockingRun, Oldest: ar.usage.Oldest(), Since: since}
	if ar.configErr != nil {
		p.ConfigErr = ar.configErr.Error()
	}
	if ar.queueErr != nil {
		p.QueueErr = ar.queueErr.Error()
	}
	return p
}

// gaveUp is the error of a waiting start whose --wait=D ran out.
func (a *admitter) gaveUp(ar *attemptResult, w backend.Waiter) error {
	req := a.req
	if latest := a.evaluate(w); latest != nil {
		ar = latest
	}
	if err := ar.undecided(); err != nil {
		return fmt.Errorf("not admitted: gave up after waiting %s in the queue, all along unable to decide: %w", req.WaitTimeout, err)
	}
	r := ar.refusal(req)
	r.WaitedFor = req.WaitTimeout
	return r
}

// unconfigured is an attempt that found crew.json unusable (cfgErr).
// Nothing can be decided: a plain start fails with the error (exit 125);
// a waiting start keeps its place in line, or takes one, and retries
// until the config is fixed or its wait runs out.
func (a *admitter) unconfigured(adm backend.Section, w backend.Waiter, cfgErr error) (*Reservation, *attemptResult, error) {
	d, req := a.d, a.req
	var ce *vocab.ConfigError
	if !req.Wait || !errors.As(cfgErr, &ce) {
		return nil, nil, cfgErr
	}
	line, err := d.liveQueue(adm)
	if err != nil {
		return a.unreadableQueue(w, err)
	}
	queue := line.tickets
	if w == nil {
		if w, err = a.joinQueue(adm, queue); err != nil {
			return nil, nil, err
		}
	}
	pos := len(queue) + 1
	for i, t := range queue {
		if t.ID == w.ID() {
			pos = i + 1
		}
	}
	return nil, &attemptResult{verdict: admission.Verdict{Reason: admission.WaitConfig, Position: pos, Ahead: pos - 1},
		pool: req.Pool, waiter: w, configErr: ce}, nil
}

// unreadableQueue is an attempt that could not list the queue (qErr):
// whether waiting starts are owed the slot cannot be told, so nothing is
// decided (fail closed). A start not yet in line fails with the error
// (exit 125); a waiting start keeps its place and retries.
func (a *admitter) unreadableQueue(w backend.Waiter, qErr error) (*Reservation, *attemptResult, error) {
	req := a.req
	if w == nil {
		return nil, nil, fmt.Errorf("not admitted: crew cannot tell whether waiting starts are owed the free slots, so nothing was recorded: %w", qErr)
	}
	return nil, &attemptResult{verdict: admission.Verdict{Reason: admission.WaitQueue}, pool: req.Pool, waiter: w, queueErr: qErr}, nil
}

// line is the queue as liveQueue read it.
type line struct {
	// tickets are the waiting starts whose waiters live, in arrival order.
	tickets []admission.Ticket
	// unreadable are the tickets among them that cannot be read: they keep
	// their places (admission.Ticket.Unreadable) and are reported.
	unreadable []ticketProblem
	// labels are the tickets' --label pairs, for status's and wait's
	// --label (admission never looks at them).
	labels map[record.RunID]record.Labels
}

// ticketProblem is a ticket of a living waiter that cannot be read.
type ticketProblem struct {
	id   record.RunID
	path string
	err  error
}

// warnings say what is wrong in the queue, for a start's messages.
func (l line) warnings() []error {
	var out []error
	for _, p := range l.unreadable {
		out = append(out, fmt.Errorf("%w: its waiter lives, so it keeps its place in line (it goes when its waiter does)", p.err))
	}
	return out
}

// diedInLine is how a start whose waiter died in line ended, for its
// record and for crew wait.
const diedInLine = "its waiting start died in line (killed?), and its place in line is free"

// recordDeadWaiter leaves the final record of a start whose waiter died in
// line, before its ticket is removed, where the store keeps dead tickets
// (backend.DeadWaiters): a background waiter killed has nobody else to
// say so, and crew wait on its id must not find nothing. A start that has
// a record already (it left the line with one, or was admitted and died
// after its reservation) keeps it.
func recordDeadWaiter(st backend.Store, e backend.TicketEntry, now time.Time) {
	dw, ok := st.(backend.DeadWaiters)
	if !ok || e.Ticket == nil {
		return
	}
	if _, err := st.Runs().ReadRun(e.ID); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	t := e.Ticket
	rec := &record.Run{RunID: e.ID, Task: t.Task, Command: t.Command, Labels: t.Labels, Host: t.Host, Pool: t.Pool}
	rec = unadmitted(rec, t.CreatedAt, now, record.Failed, vocab.ExitInternal, diedInLine)
	_ = dw.RecordNeverAdmitted(rec) // if it cannot be written, crew wait says what the ticket's absence says
}

// liveQueue lists the waiting starts whose waiters live, in arrival order.
// With the admission lock held (adm), dead waiters' tickets are removed on
// the way. A ticket that cannot be read keeps its place while its waiter
// is shown alive (its lock held); a queue that cannot be listed is a
// *QueueError: nobody can be let past waiters nobody can see.
func (d *Dispatcher) liveQueue(adm backend.Section) (line, error) { return liveQueueUntil(d, adm, nil) }

// liveQueueUntil is d's liveQueue read only as far as enough (given the
// line so far) wants; nil reads the whole queue.
func liveQueueUntil(d *Dispatcher, adm backend.Section, enough func(line) bool) (line, error) {
	var l line
	taken := 0
	more := func(read []backend.TicketEntry) bool {
		for ; taken < len(read); taken++ {
			l.take(d, adm, read[taken])
		}
		return enough != nil && enough(l)
	}
	var entries []backend.TicketEntry
	var err error
	if adm != nil {
		entries, err = adm.ListTicketsUntil(more)
	} else {
		entries, err = d.queue().ListTicketsUntil(more)
	}
	if err != nil {
		return line{}, &vocab.QueueError{Path: d.queue().QueuePath(), Err: err}
	}
	for ; taken < len(entries); taken++ { // what enough was not asked about
		l.take(d, adm, entries[taken])
	}
	return l, nil
}

// upToOwn is liveQueueUntil's enough for waiter w deciding for itself:
// only the tickets ahead of its own can hold it back.
func upToOwn(w backend.Waiter) func(line) bool {
	if w == nil {
		return nil // a newcomer lines up behind every ticket
	}
	id := w.ID()
	return func(l line) bool { return len(l.tickets) > 0 && l.tickets[len(l.tickets)-1].ID == id }
}

// take adds entry e of d's queue to the line: a live waiter's ticket
// takes its place, a dead waiter's goes (with the admission lock held,
// adm).
func (l *line) take(d *Dispatcher, adm backend.Section, e backend.TicketEntry) {
	if !e.Waiter.MayLive() {
		if adm != nil {
			recordDeadWaiter(d.Store, e, d.now())
			adm.RemoveDeadTicket(e.ID)
		}
		return
	}
	if e.Err != nil && e.Waiter != record.Alive {
		// Not a waiter crew can see (a lock that cannot be probed
		// beside a ticket that cannot be read is junk, not a start):
		// keeping a place for it would wedge the line.
		return
	}
	if e.Err != nil {
		since, _ := e.ID.CreatedAt()
		l.tickets = append(l.tickets, admission.Ticket{ID: e.ID, Since: since, Unreadable: true})
		l.unreadable = append(l.unreadable, ticketProblem{id: e.ID, path: e.Path, err: e.Err})
		return
	}
	l.tickets = append(l.tickets, admission.Ticket{ID: e.ID, Task: e.Ticket.Task, Pool: e.Ticket.Pool, Since: e.Ticket.CreatedAt})
	if len(e.Ticket.Labels) > 0 {
		if l.labels == nil {
			l.labels = map[record.RunID]record.Labels{}
		}
		l.labels[e.ID] = e.Ticket.Labels
	}
}

// joinQueue creates this process's ticket; the caller holds the admission
// lock, which is what makes arrival order total.
func (a *admitter) joinQueue(adm backend.Section, queue []admission.Ticket) (backend.Waiter, error) {
	d, req := a.d, a.req
	now := d.now()
	id := record.NewRunID(now)
	if len(queue) > 0 {
		id = record.NewRunIDAfter(queue[len(queue)-1].ID, now)
	}
	createdAt, _ := id.CreatedAt()
	return adm.Enqueue(&record.Ticket{Version: record.TicketVersion, RunID: id, Task: req.Task, Pool: req.Pool,
		Command: req.Command, Host: d.Host, PID: os.Getpid(), CreatedAt: createdAt, Labels: req.Labels})
}

// admitWaiting is Admit with --wait: attempt, and while not admitted,
// sleep on the bell (rung by whoever frees a slot this waiter may take),
// with a slow poll as a fallback, until admitted, timed out or cancelled.
// A background waiter (a.keep) starts with the place in line it took
// over (w), and leaves it itself.
func (a *admitter) admitWaiting(ctx context.Context, w backend.Waiter) (*Reservation, error) {
	d, req := a.d, a.req
	began := time.Now()
	var deadline <-chan time.Time
	if req.WaitTimeout > 0 {
		t := time.NewTimer(max(req.WaitTimeout-a.waited, 0))
		defer t.Stop()
		deadline = t.C
	}
	report := func(p vocab.WaitProgress) {
		if req.OnWait != nil {
			req.OnWait(p)
		}
	}
	defer func() {
		if w != nil && !a.keep {
			w.Remove()      // harmless once admitted: the ticket is gone already
			d.RingWaiters() // whoever may now go first
		}
	}()
	for {
		if w != nil {
			// crew stop asks a waiting start to leave by a stop request
			// and a ring of its bell, never by a signal to a pid.
			if err := a.stoppedWhileWaiting(w); err != nil {
				return nil, err
			}
		}
		res, ar, err := a.attempt(ctx, w)
		if err != nil {
			return nil, err
		}
		if res != nil {
			if w != nil {
				since, _ := w.ID().CreatedAt()
				report(vocab.WaitProgress{RunID: res.Rec.RunID, Task: req.Task, Admitted: true, Since: since})
				w = nil
			}
			return res, nil
		}
		joined := w == nil
		w = ar.waiter
		if joined && a.handOff {
			// In line: a background waiter waits in its place from here;
			// where it stands is told once (StartRequest.OnQueued).
			a.queued = &queued{w: w, progress: ar.progress(req), waited: time.Since(began)}
			w = nil
			return nil, nil
		}
		report(ar.progress(req))
		if joined && a.evaluate(w) == nil {
			// Capacity freed between our decision and our ticket becoming
			// visible was announced to nobody: whoever freed it looked
			// at a queue without us. Look once more before sleeping.
			continue
		}
		if err := a.sleepUntilWorthTrying(ctx, w, deadline, report, ar.undecided() != nil); err != nil {
			if !errors.Is(err, errWaitTimeout) {
				return nil, err
			}
			return nil, a.gaveUp(ar, w)
		}
		failpoint.Hit(failpoint.QueueWoken)
	}
}

var errWaitTimeout = errors.New("wait timed out")

// sleepUntilWorthTrying returns when the bell rings, or when a fallback
// poll finds that this waiter may be admitted now. While nothing can be
// decided (configBroken: crew.json is unusable, or the queue cannot be
// listed) every poll tries again: nobody rings when it is fixed by hand,
// and the waiter must stop showing the problem once it is.
func (a *admitter) sleepUntilWorthTrying(ctx context.Context, w backend.Waiter, deadline <-chan time.Time, report func(vocab.WaitProgress), configBroken bool) error {
	req := a.req
	for {
		every := pollInterval
		if w.Changed() != nil && !configBroken {
			every = safetyPollInterval // the store tells of what polls would find
		}
		poll := time.NewTimer(every + rand.N(every/2))
		if failpoint.Skip(failpoint.QueuePoll) {
			poll.Stop() // test builds only: prove that what wakes a waiter is not its poll
		}
		select {
		case <-ctx.Done():
			poll.Stop()
			return ctx.Err()
		case <-deadline:
			poll.Stop()
			return errWaitTimeout
		case <-w.Rung():
			poll.Stop()
			return nil
		case <-w.Changed():
			poll.Stop()
			if a.stopRequestFor(w) != nil {
				return nil
			}
			// Only a waiter that may now be admitted takes the admission
			// lock; a sentinel, told for all, rings the others who may.
			if ar := a.evaluate(w); ar != nil {
				if w.Sentinel() {
					a.d.RingWaiters()
				}
				configBroken = false // evaluate could read it
				report(ar.progress(req))
				continue
			}
			return nil
		case <-poll.C:
			if a.stopRequestFor(w) != nil {
				return nil // a ring that was lost: leave now
			}
			// Cheap first: as long as every slot is held by a living run,
			// nothing can have changed unannounced. Only free capacity
			// (a run that died without a word frees its slot) makes it
			// worth reading the whole queue.
			if !configBroken && !a.capacityLeft() {
				continue
			}
			ar := a.evaluate(w)
			if ar == nil {
				return nil // admissible, or cannot tell: try under the lock
			}
			configBroken = false // evaluate could read it
			report(ar.progress(req))
		}
	}
}

// evaluate decides for a waiter without the admission lock (read-only), to
// see whether taking the lock is worth it. It returns nil if the waiter
// looks admissible (or the state cannot be read: let the lock decide).
func (a *admitter) evaluate(w backend.Waiter) *attemptResult {
	d, req := a.d, a.req
	cfg, _, err := d.Store.LoadConfig()
	if err != nil {
		return nil
	}
	set, err := d.readActive(true, nil)
	if err != nil {
		return nil
	}
	line, err := liveQueueUntil(d, nil, upToOwn(w))
	if err != nil {
		return nil
	}
	usage := set.usage()
	v := admission.Decide(cfg, usage, line.tickets, admission.Candidate{Ticket: w.ID(), Task: req.Task, Pool: req.Pool})
	if v.Admit {
		return nil
	}
	return &attemptResult{verdict: v, cfg: cfg, usage: usage, pool: req.Pool, waiter: w}
}

// capacityLeft reports whether a run of req's pool would fit under the
// caps right now, ignoring the queue; it reads only the active set.
func (a *admitter) capacityLeft() bool {
	d, req := a.d, a.req
	cfg, _, err := d.Store.LoadConfig()
	if err != nil {
		return true // cannot tell: let the full evaluation decide
	}
	set, err := d.readActive(true, nil)
	if err != nil {
		return true
	}
	usage := set.usage()
	if _, busy := usage.ByTask[req.Task]; busy {
		return false // our task's run is alive; its end is announced
	}
	return admission.Fits(cfg, usage, req.Pool)
}

// RingWaiters wakes the waiters that may be admitted now. Whoever frees
// capacity calls it (a finishing run, a waiter leaving, a reaped run, a
// raised cap); it only reads, and a waiter always re-decides under the
// admission lock, so a stale or extra ring costs one attempt, never a
// wrong admission. While crew.json is unusable nothing can be decided:
// every waiter is rung, to say so on its wait line and to keep looking
// until the file is fixed.
func (d *Dispatcher) RingWaiters() {
	// The line is read only as far as the caps would let anyone in (with
	// no slot free, one ticket): a handoff reads a waiter or two, not the
	// whole queue (issue 25). The config and the active set are read with
	// the first ticket: with nobody in line, nothing more is.
	var (
		loaded         bool
		cfg            record.Config
		usage          admission.Usage
		cfgErr, setErr error
	)
	load := func() {
		if loaded {
			return
		}
		loaded = true
		if cfg, _, cfgErr = d.Store.LoadConfig(); cfgErr == nil {
			var set *activeSet
			if set, setErr = d.readActive(true, nil); setErr == nil {
				usage = set.usage()
			}
		}
	}
	full := func(l line) bool {
		load()
		switch {
		case cfgErr != nil:
			return false // every waiter is rung: all are needed
		case setErr != nil:
			return true // nothing can be decided
		}
		return admission.Full(cfg, usage, l.tickets)
	}
	line, err := liveQueueUntil(d, nil, full)
	queue := line.tickets
	if err != nil || len(queue) == 0 {
		return
	}
	if load(); setErr != nil {
		return
	}
	if cfgErr != nil {
		for _, t := range queue {
			d.queue().Ring(t.ID)
		}
		return
	}
	for i, v := range admission.Plan(cfg, usage, queue) {
		if v.Admit {
			d.queue().Ring(queue[i].ID)
		}
	}
}
