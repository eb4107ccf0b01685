// Package dispatch orchestrates crew's commands on one state root: it
// admits runs (asking package admission to decide, inside the admission
// critical section of package runstore), waits in the queue, hands
// admitted runs to package supervise, reports status, stops and waits for
// runs, and asks package recovery to finalize the dead.
package dispatch

import (
	"io"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/localstore"
	"github.com/crew-dev/crew/internal/runstore"
)

// Dispatcher works on one store.
type Dispatcher struct {
	// Store is the store: what every operation goes through.
	Store backend.Store
	// Logs is this host's state root, where the logs of the runs this host
	// supervises are kept (on a state root, the store itself).
	Logs *runstore.Store
	// Now is the clock; tests may replace it.
	Now func() time.Time
	// Host names this machine in records.
	Host string
}

// New returns a dispatcher for the state root at root (an absolute path).
func New(root string) *Dispatcher {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	st := localstore.New(root)
	return &Dispatcher{Store: st, Logs: st.Store, Now: time.Now, Host: host}
}

// Over returns a dispatcher for store (one shared with other hosts), whose
// runs this host supervises keep their logs in logs; host names this host
// in records.
func Over(store backend.Store, logs *runstore.Store, host string) *Dispatcher {
	return &Dispatcher{Store: store, Logs: logs, Now: time.Now, Host: host}
}

// Close lets go of the store (an etcd client's connections).
func (d *Dispatcher) Close() error {
	if c, ok := d.Store.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// stateRoot is the store if it is a state root on this machine: what only
// a state root has (files to share with a group, a layout to repair).
func (d *Dispatcher) stateRoot() (*localstore.Store, bool) {
	st, ok := d.Store.(*localstore.Store)
	return st, ok
}

func (d *Dispatcher) now() time.Time { return d.Now().UTC() }

func (d *Dispatcher) runs() backend.Runs       { return d.Store.Runs() }
func (d *Dispatcher) queue() backend.Queue     { return d.Store.Queue() }
func (d *Dispatcher) history() backend.History { return d.Store.History() }

// procs is what the store can prove of runs' processes, if they live on
// this machine.
func (d *Dispatcher) procs() (backend.Processes, bool) {
	p, ok := d.Store.(backend.Processes)
	return p, ok
}

// parts are the store's parts as one, for code that reads several.
type parts struct {
	backend.Runs
	backend.Queue
	backend.History
	backend.Logs
}

func (d *Dispatcher) parts() parts {
	return parts{d.Store.Runs(), d.Store.Queue(), d.Store.History(), d.Store.Logs()}
}

// Admin is crew's upkeep of a store, what operators run now and then:
// crew init (and sharing a state root), crew recover, crew prune.
type Admin struct{ d *Dispatcher }

// Admin is the upkeep of d's store.
func (d *Dispatcher) Admin() Admin { return Admin{d} }
