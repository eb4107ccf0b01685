package dispatch

import (
	"github.com/crew-dev/crew/internal/recovery"
)

// Recover is `crew recover`: it brings every record of the active set to
// the truth and sweeps what crashes left behind; see recovery.Recover.
func (d *Dispatcher) Recover(opts recovery.Options) (*recovery.Report, error) {
	opts.Now, opts.Host = d.Now, d.Host
	opts.Holders = d.holderPIDs
	rep, err := recovery.Recover(d.Local, opts)
	if err == nil && rep.Count(recovery.Finalized)+rep.Count(recovery.Cleaned) > 0 {
		d.RingWaiters() // finalized runs freed their slots
	}
	return rep, err
}

// Prune is `crew prune`: it removes finished runs' records and logs; see
// recovery.Prune.
func (d *Dispatcher) Prune(opts recovery.PruneOptions) (*recovery.PruneReport, error) {
	opts.Now = d.now()
	return recovery.Prune(d.Local, opts)
}
