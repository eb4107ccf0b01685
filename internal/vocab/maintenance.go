package vocab

import (
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// RecoverVersion is the version of the `crew recover --json` schema.
const RecoverVersion = 1

// RecoverOutcome is what recovery did (or, with --dry-run, would do) with
// one item.
type RecoverOutcome string

const (
	Finalized   RecoverOutcome = "finalized"   // owner gone: recorded as interrupted, out of the active set
	Orphaned    RecoverOutcome = "orphaned"    // supervisor gone, command still running: left running
	Alive       RecoverOutcome = "alive"       // someone still works on it: skipped
	Quarantined RecoverOutcome = "quarantined" // unreadable record moved to quarantine
	Cleaned     RecoverOutcome = "cleaned"     // leftover of a crash removed
	Indexed     RecoverOutcome = "indexed"     // the index of finished runs built anew, or completed
	FailedItem  RecoverOutcome = "failed"      // could not be handled (or not reached in time)
)

// RecoverItem is one line of the recovery report.
type RecoverItem struct {
	RunID   string         `json:"runId"`
	Task    string         `json:"task"`
	Path    string         `json:"path"`
	Outcome RecoverOutcome `json:"outcome"`
	Reason  string         `json:"reason"`
	// HolderPIDs, for an orphan, are the processes shown holding its
	// owner lock; HoldersUnknown says why they could not be listed.
	HolderPIDs     []int  `json:"holderPids,omitempty"`
	HoldersUnknown string `json:"holderPidsUnknown,omitempty"`
}

// RecoverReport is `crew recover`'s result.
type RecoverReport struct {
	Version int           `json:"version"`
	DryRun  bool          `json:"dryRun"`
	Items   []RecoverItem `json:"items"`
}

// Count returns how many items had outcome o.
func (r *RecoverReport) Count(o RecoverOutcome) int {
	n := 0
	for _, it := range r.Items {
		if it.Outcome == o {
			n++
		}
	}
	return n
}

// PruneVersion is the version of `crew prune --json`.
const PruneVersion = 1

// PrunedRun is one removed (or, dry, removable) finished run.
type PrunedRun struct {
	RunID      record.RunID `json:"runId"`
	Task       string       `json:"task"`
	FinishedAt *time.Time   `json:"finishedAt"`
	Path       string       `json:"path"`
	Bytes      int64        `json:"bytes"`
}

// PruneReport is what crew prune did.
type PruneReport struct {
	Version int         `json:"version"`
	DryRun  bool        `json:"dryRun"`
	Removed []PrunedRun `json:"removed"`
	Kept    int         `json:"kept"`
	Errors  []string    `json:"errors"`
}
