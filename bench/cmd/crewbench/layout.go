package main

// Everything the harness knows about where crew keeps things in its state
// root is in this file. It is the layout docs/state-root.md documents
// ("State root"), nothing more:
//
//	runs/active/<run-id>.run                active records (record files: slotfile.go)
//	runs/done/<yyyy-mm-ddThh>/<run-id>.run  finished records, by the run's UTC creation hour
//	run ids: r-YYYYMMDDTHHMMSS.NNNNNNNNNZ-<16 hex>, the UTC creation time and 64 random bits
//
// The other files of a run (owner locks, log) are not named here: the
// harness copies whatever files named after the run id a live run has
// (see probe.go). checkLayout (probe.go) tests all of this against a real
// crew run at start-up, so a layout change stops the harness with a message
// naming this file instead of benchmarking files crew would never read.

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"time"
)

const (
	runIDTimeLayout = "20060102T150405.000000000Z"
	shardLayout     = "2006-01-02T15"
	// layoutFile is named in every layout error: the one place to update.
	layoutFile = "bench/cmd/crewbench/layout.go"
	// doneLayoutDoc and activeLayoutDoc describe the layout in reports.
	doneLayoutDoc   = "runs/done/<yyyy-mm-ddThh>/<run-id>.run"
	activeLayoutDoc = "runs/active/<run-id>.run"
	runIDDoc        = "r-YYYYMMDDTHHMMSS.NNNNNNNNNZ-<16 hex>"
)

// runIDRe matches a run id anywhere in a string (messages are normalized
// with it); isRunID checks a whole string.
var (
	runIDRe      = regexp.MustCompile(runIDPattern)
	wholeRunIDRe = regexp.MustCompile(`^` + runIDPattern + `$`)
)

const runIDPattern = `r-\d{8}T\d{6}\.\d{9}Z-[0-9a-f]{16}`

func isRunID(s string) bool { return wholeRunIDRe.MatchString(s) }

// newRunID makes a run id for a run created at t.
func newRunID(t time.Time, rnd *rand.Rand) string {
	return "r-" + t.UTC().Format(runIDTimeLayout) + fmt.Sprintf("-%016x", rnd.Uint64())
}

// runIDTime is the creation time a run id carries.
func runIDTime(id string) (time.Time, error) {
	if !isRunID(id) {
		return time.Time{}, fmt.Errorf("%q is not a run id of the form %s", id, runIDDoc)
	}
	return time.Parse(runIDTimeLayout, id[2:28])
}

// shardOf is the finished-runs directory name of a run id (its UTC
// creation hour); "" for something that is not a run id.
func shardOf(id string) string {
	t, err := runIDTime(id)
	if err != nil {
		return ""
	}
	return t.UTC().Format(shardLayout)
}

func activeDir(root string) string { return filepath.Join(root, "runs", "active") }
func doneDir(root string) string   { return filepath.Join(root, "runs", "done") }

func activePath(root, id string) string { return filepath.Join(activeDir(root), id+".run") }

func donePath(root, id string) string {
	return filepath.Join(doneDir(root), shardOf(id), id+".run")
}
