package record

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/crew-dev/crew/internal/duration"
)

// MaxRetries bounds crew start --retries: every attempt adds an entry and
// two events to the run's record, which must stay well inside the 1 MiB
// that a record may take when read.
const MaxRetries = 100

// Attempt is one run of a run's command, for a run started with
// --retries. The run's own StartedAt, FinishedAt, ExitCode and Signal are
// its first start and its last attempt's end.
type Attempt struct {
	Number    int        `json:"attempt"` // 1, 2, ...
	StartedAt time.Time  `json:"startedAt"`
	PID       int        `json:"pid"`
	EndedAt   *time.Time `json:"finishedAt,omitempty"`
	ExitCode  *int       `json:"exitCode,omitempty"`
	Signal    string     `json:"signal,omitempty"`
	TimedOut  bool       `json:"timedOut,omitempty"`
	// Reason says how it ended: "command exited with status 1".
	Reason string `json:"reason,omitempty"`
}

// Duration is a duration stored as crew writes durations everywhere
// ("90s", "1h30m", "7d"), as in crew.json's retainFor.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(duration.Format(time.Duration(d)))
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("not a duration string: %s", b)
	}
	v, err := duration.Parse(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MaxAttempts is how many times the command may run: 1 + Retries.
func (r *Run) MaxAttempts() int { return 1 + r.Retries }

// Attempt returns the latest attempt, or nil (a run without retries).
func (r *Run) Attempt() *Attempt {
	if len(r.Attempts) == 0 {
		return nil
	}
	return &r.Attempts[len(r.Attempts)-1]
}
