// Package dispatch orchestrates crew's commands on one state root: it
// admits runs (asking package admission to decide, inside the admission
// critical section of package runstore), waits in the queue, hands
// admitted runs to package supervise, reports status, stops and waits for
// runs, and asks package recovery to finalize the dead.
package dispatch

import (
	"os"
	"time"

	"github.com/crew-dev/crew/internal/runstore"
)

// Dispatcher works on one state root.
type Dispatcher struct {
	Store *runstore.Store
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
	return &Dispatcher{Store: runstore.New(root), Now: time.Now, Host: host}
}

func (d *Dispatcher) now() time.Time { return d.Now().UTC() }
