package dispatch

import (
	"fmt"

	"github.com/crew-dev/crew/internal/admission"
	"github.com/crew-dev/crew/internal/backend"
	"github.com/crew-dev/crew/internal/record"
)

// activeSet is the active set with each run's owner liveness: everything
// admission, the queue and status derive slot usage from. Every reader
// takes liveness from Store.OwnerState, the one answer there is.
type activeSet struct {
	entries []backend.ActiveEntry
	owners  map[record.RunID]record.Owner
}

// readActive reads the active set. Status passes fast false (it shows
// records); admission and the queue pass true and may count living runs
// from the active index (runstore.ScanActive); admission passes the held
// admission lock, which also tidies the index.
func (d *Dispatcher) readActive(fast bool, adm backend.Section) (*activeSet, error) {
	var runs []backend.ActiveRun
	var err error
	if adm != nil {
		runs, err = adm.ScanActive()
	} else {
		runs, err = d.runs().ScanActive(fast)
	}
	if err != nil {
		return nil, err
	}
	a := &activeSet{entries: make([]backend.ActiveEntry, len(runs)), owners: make(map[record.RunID]record.Owner, len(runs))}
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
func (a *activeSet) warnings() []error {
	var out []error
	for _, e := range a.entries {
		if e.Finished {
			continue
		}
		o := a.owners[e.ID]
		switch {
		case e.ID == "":
			out = append(out, fmt.Errorf("%w; move it out of the way", e.Err))
		case o.Err != nil:
			out = append(out, fmt.Errorf("%w; counted as holding a slot", o.Err))
		case e.Err != nil && o.Owner.MayLive():
			out = append(out, fmt.Errorf("%w; its owner is alive, so it is counted as holding a slot", e.Err))
		case e.Err != nil:
			out = append(out, fmt.Errorf("%w; its owner is gone, so it holds no slot; run `crew recover` to quarantine it", e.Err))
		}
	}
	return out
}

// dead lists the runs whose owners are provably gone and whose records
// may be finalized: active records and finished leftovers.
func (a *activeSet) dead() []backend.ActiveEntry {
	var out []backend.ActiveEntry
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

// exactHolder completes a holder counted from the active index (which
// knows runs only as active) from its record, for the messages that name
// it: whether it is provisioning or running, and its supervisor now.
func (d *Dispatcher) exactHolder(set *activeSet, h *admission.Holder) {
	if h == nil {
		return
	}
	for _, e := range set.entries {
		if e.ID == h.RunID && e.Indexed {
			if rec, err := d.runs().ReadActive(h.RunID); err == nil {
				h.State, h.PID = rec.State, rec.SupervisorPID
			}
			return
		}
	}
}
