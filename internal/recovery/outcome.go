package recovery

import (
	"fmt"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
)

// endFromKeptOutcome makes rec final from the outcome its supervisor kept
// in the run's owner lock file because it could not write the final
// record (a full disk). That outcome is what the supervisor saw, so it
// beats any "exit status unknown". It reports whether there was one; an
// unreadable one is noted in note, and the caller falls back.
func endFromKeptOutcome(locks *runstore.RunLocks, rec *record.Run) (ended bool, note string) {
	o, err := locks.Outcome()
	if err != nil {
		return false, fmt.Sprintf("an outcome kept in the owner lock file could not be used (%v)", err)
	}
	if o == nil {
		return false, ""
	}
	why := fmt.Sprintf("its supervisor (pid %d) could not record this end (%s) and kept it in the owner lock file; "+
		"crew process %d recorded it at %s", o.SupervisorPID, o.Cause, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	reason := why
	if o.Reason != "" {
		reason = o.Reason + "; " + why
	}
	rec.Signal = o.Signal
	rec.Finish(o.State, o.FinishedAt, o.ExitCode, reason)
	return true, ""
}
