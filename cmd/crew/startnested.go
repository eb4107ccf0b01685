package main

import (
	"os"

	"github.com/crew-dev/crew/internal/record"
)

// parentRun is the run whose command called this crew start, from the
// CREW_RUN_ID crew gives every command: admission refuses a start that
// could only wait for its own ancestors (exit 78). Anything that is not a
// run id is ignored: the variable may be the user's own.
func parentRun() record.RunID {
	v := os.Getenv("CREW_RUN_ID")
	if !record.LooksLikeRunID(v) {
		return ""
	}
	return record.RunID(v)
}
