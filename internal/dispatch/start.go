package dispatch

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/failpoint"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/supervise"
	"github.com/crew-dev/crew/internal/vocab"
)

// Start admits, launches and supervises one run. It returns the run's id
// (empty if none was reserved) and nil once the command exited 0; every
// other outcome is a typed error: *RefusedError, *UsageError,
// *vocab.ExitError (the command's own exit status),
// *vocab.LaunchError, *vocab.SignalledError,
// *vocab.InternalError, or crew's own failure.
func (d *Dispatcher) Start(req vocab.StartRequest) (record.RunID, error) {
	if req.Warn == nil {
		req.Warn = func(error) {}
	}
	res, q, sig, err := d.admitInterruptibly(req)
	if q != nil {
		return q.w.ID(), q.toBackground(d, req, sig)
	}
	var refused *vocab.RefusedError
	switch {
	case res != nil:
		for _, w := range res.Warnings {
			req.Warn(w)
		}
	case errors.As(err, &refused):
		for _, w := range refused.Warnings {
			req.Warn(w)
		}
	}
	if err != nil {
		if sig != 0 {
			return "", &vocab.SignalledError{Signal: sig}
		}
		return "", err
	}
	defer res.Starter.Close()
	failpoint.Hit(failpoint.Admitted)
	return res.Rec.RunID, res.supervise(d, req, sig)
}

// supervise launches and supervises an admitted run as req asks: in the
// foreground, or handed to a detached supervisor (Detach); or records it
// stopped before launch if a stop signal (sig) came first.
func (res *Reservation) supervise(d *Dispatcher, req vocab.StartRequest, sig syscall.Signal) error {
	sreq := supervise.Request{Run: res.Run, Logs: d.Logs, Rec: res.Rec, Grace: req.Grace, Stdin: req.Stdin,
		Stdout: req.Stdout, Stderr: req.Stderr, Env: req.Env, Signals: req.Signals, Warn: req.Warn,
		Note: req.Note, Now: d.Now, Finished: d.RunFinished, NoPTY: req.NoPTY}
	if req.Tag {
		sreq.Tag = req.Task + "\t"
	}
	switch {
	case sig != 0:
		return supervise.StopBeforeLaunch(sreq, sig)
	case req.Detach:
		return supervise.Detach(sreq)
	}
	return supervise.Run(sreq)
}

// admitInterruptibly runs Admit while watching for stop signals: a signal
// while waiting for the admission lock or in the queue abandons the wait;
// a signal that arrives once the run is reserved is returned so the run
// is recorded as stopped instead of launched. A detached start with
// --wait that is not admitted at once comes back in line (queued), for a
// background waiter to wait in its place.
func (d *Dispatcher) admitInterruptibly(req vocab.StartRequest) (*Reservation, *queued, syscall.Signal, error) {
	var res *Reservation
	var q *queued
	var err error
	sig := WatchStopSignals(req.Signals, func(ctx context.Context) {
		res, q, err = admit(ctx, d, req.AdmitRequest, req.Detach && req.Wait)
	})
	return res, q, sig, err
}

// WatchStopSignals runs admit with a context that the first stop signal
// from signals cancels, and returns that signal (0: none came before admit
// returned). The signal is returned even when admit reserved a run first:
// the watcher took it, so the caller records that run as stopped before
// launch rather than hand it to a supervisor that will never hear it.
// Every store's crew start admits this way.
func WatchStopSignals(signals <-chan os.Signal, admit func(ctx context.Context)) syscall.Signal {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got atomic.Int32
	done := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case s := <-signals:
			if ss, ok := s.(syscall.Signal); ok {
				got.Store(int32(ss))
			} else {
				got.Store(int32(syscall.SIGTERM))
			}
			failpoint.Hit(failpoint.StopSignal)
			cancel()
		case <-done:
		}
	}()
	admit(ctx)
	close(done)
	<-watcherDone
	return syscall.Signal(got.Load())
}

// RecordRefusal appends a refused start to the store's refusal log, for
// `crew status TASK`, with the exit code crew gave it, where the store
// keeps one (a state root).
func (d *Dispatcher) RecordRefusal(task string, e *vocab.RefusedError, exitCode int) {
	if r, ok := d.Store.(backend.Refusals); ok {
		r.AppendRefusal(record.Refusal{At: d.now(), Task: task, Reason: e.Error(), ExitCode: exitCode, PID: os.Getpid()})
	}
}
