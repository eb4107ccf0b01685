package dispatch

import (
	"fmt"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// activeSet is the active set with each run's owner liveness: everything
// admission, the queue and status derive slot usage from. Every reader
// takes liveness from Store.OwnerState, the one answer there is.
type activeSet struct {
	entries []runstore.ActiveEntry
	owners  map[record.RunID]record.Owner
}

func (d *Dispatcher) readActive() (*activeSet, error) {
	runs, err := d.Store.ScanActive()
	if err != nil {
		return nil, err
	}
	a := &activeSet{entries: make([]runstore.ActiveEntry, len(runs)), owners: make(map[record.RunID]record.Owner, len(runs))}
	for i, r := range runs {
		a.entries[i] = r.ActiveEntry
		if r.ID != "" {
			a.owners[r.ID] = r.Owner
		}
	}
	return a, nil
}

// runs is the active set as admission counts it (finished leftovers hold
// no slot and are left out).
func (a *activeSet) runs() []admission.Run {
	out := make([]admission.Run, 0, len(a.entries))
	for _, e := range a.entries {
		if !e.Finished {
			out = append(out, admission.Run{ID: e.ID, Rec: e.Rec, Owner: a.owners[e.ID]})
		}
	}
	return out
}

func (a *activeSet) usage() admission.Usage { return admission.Count(a.runs()) }

// warnings describes what is wrong in the active set, and what that means
// for the slots, for the user of a start.
func (a *activeSet) warnings() []string {
	var out []string
	for _, e := range a.entries {
		if e.Finished {
			continue
		}
		o := a.owners[e.ID]
		switch {
		case e.ID == "":
			out = append(out, fmt.Sprintf("%v; move it out of the way", e.Err))
		case o.Err != nil:
			out = append(out, fmt.Sprintf("%v; counted as holding a slot", o.Err))
		case e.Err != nil && o.Owner.MayLive():
			out = append(out, fmt.Sprintf("%v; its owner is alive, so it is counted as holding a slot", e.Err))
		case e.Err != nil:
			out = append(out, fmt.Sprintf("%v; its owner is gone, so it holds no slot; run `crew recover` to quarantine it", e.Err))
		}
	}
	return out
}

// dead lists the runs whose owners are provably gone and whose records
// may be finalized: active records and finished leftovers.
func (a *activeSet) dead() []runstore.ActiveEntry {
	var out []runstore.ActiveEntry
	for _, e := range a.entries {
		o := a.owners[e.ID]
		if e.ID == "" || o.Owner != record.Dead {
			continue
		}
		if e.Finished || e.Rec != nil {
			out = append(out, e)
		}
	}
	return out
}
