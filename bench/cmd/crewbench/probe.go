package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// crewSample is what the harness learns from the crew under test at
// start-up, before anything is timed: the layout of layout.go holds (or
// the harness stops), a finished and a running record to copy, and the
// other files a live run has.
type crewSample struct {
	done, active *template
	// companions are the files of a running run other than its record
	// (owner locks, log): what a SIGKILLed supervisor and command leave
	// behind. Paths are relative to the state root, the run id replaced by
	// idMark.
	companions []companion
}

type companion struct {
	rel  string
	data []byte
}

const idMark = "{run-id}"

// checkLayout runs crew in a scratch state root and checks every
// assumption of layout.go against what it did, then keeps the records it
// wrote as templates.
func (h layoutProbe) checkLayout() error {
	root := h.path("roots", "layout")
	if err := h.initRoot(root, 4); err != nil {
		return fmt.Errorf("layout check: %w", err)
	}
	done, err := h.probeFinished(root)
	if err != nil {
		return err
	}
	active, comps, err := h.probeRunning(root)
	if err != nil {
		return err
	}
	h.sample = &crewSample{done: done, active: active, companions: comps}
	h.progress("layout check: finished records in %s, active in %s, run ids %s; a live run also has %s",
		doneLayoutDoc, activeLayoutDoc, runIDDoc, companionNames(comps))
	return nil
}

// probeFinished runs three starts, finds their finished records where
// layout.go says, and returns the newest as a template.
func (h layoutProbe) probeFinished(root string) (*template, error) {
	for i := range 3 {
		if _, err := output(h.env, h.crew, "--root", root, "start", fmt.Sprintf("layout-%d", i), "--", "true"); err != nil {
			return nil, fmt.Errorf("layout check: %w", err)
		}
	}
	st, err := h.status(root)
	if err != nil {
		return nil, fmt.Errorf("layout check: %w", err)
	}
	if len(st.Finished) != 3 || len(st.Active) != 0 {
		return nil, fmt.Errorf("layout check: after 3 starts of `true`, crew status --json lists %d finished and %d active runs, want 3 and 0", len(st.Finished), len(st.Active))
	}
	for _, run := range st.Finished {
		if err := checkRunID(run); err != nil {
			return nil, err
		}
		if !isFile(donePath(root, run.RunID)) {
			return nil, layoutError(root, run.RunID, "finished record", donePath(root, run.RunID))
		}
	}
	tp, err := loadTemplate(donePath(root, st.Finished[0].RunID))
	if err != nil {
		return nil, fmt.Errorf("layout check: %w", err)
	}
	if tp.str("runId") != st.Finished[0].RunID {
		return nil, fmt.Errorf("layout check: record %s has runId %q, crew status says %q", tp.path, tp.str("runId"), st.Finished[0].RunID)
	}
	return tp, nil
}

// checkRunID checks that an id crew reported has the documented form and
// carries the run's creation time (which the finished-run shard is by).
func checkRunID(run statusRun) error {
	t, err := runIDTime(run.RunID)
	if err != nil {
		return fmt.Errorf("layout check: crew status --json reports run id %q: %w; update %s", run.RunID, err, layoutFile)
	}
	if d := t.Sub(run.CreatedAt); d < -time.Second || d > time.Second {
		return fmt.Errorf("layout check: run id %s says created at %s, crew status --json says %s; finished runs are sharded by the id's time (%s)",
			run.RunID, t.Format(time.RFC3339Nano), run.CreatedAt.Format(time.RFC3339Nano), layoutFile)
	}
	return nil
}

// probeRunning starts a run of `sleep 5`, copies its record and the other
// files named after its id while it runs, stops it, and checks that its
// finished record lands in the documented place too.
func (h layoutProbe) probeRunning(root string) (*template, []companion, error) {
	cmd := exec.Command(h.crew, "--root", root, "start", "layout-active", "--", "sleep", "5")
	cmd.Env = h.env
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("layout check: start crew: %w", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM) // forwarded to sleep; recorded as stopped
			_ = cmd.Wait()
		}
	}
	defer stop()
	st, err := h.awaitStatus(root, 10*time.Second, func(s *statusSnapshot) bool {
		return len(s.Active) == 1 && s.Active[0].State == "running"
	})
	if err != nil {
		return nil, nil, fmt.Errorf("layout check: wait for a running run: %w", err)
	}
	id := st.Active[0].RunID
	if err := checkRunID(st.Active[0]); err != nil {
		return nil, nil, err
	}
	tp, comps, err := snapshotRunning(root, id)
	if err != nil {
		return nil, nil, err
	}
	stop()
	if !isFile(donePath(root, id)) || isFile(activePath(root, id)) {
		return nil, nil, layoutError(root, id, "finished record of a stopped run", donePath(root, id))
	}
	return tp, comps, nil
}

// snapshotRunning copies the active record of run id (the live file will
// change when the run ends) and every other file named after the id.
func snapshotRunning(root, id string) (*template, []companion, error) {
	path := activePath(root, id)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, layoutError(root, id, "active record", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("layout check: %w", err)
	}
	if b, err = recordOfFile(b); err != nil {
		return nil, nil, fmt.Errorf("layout check: record %s: %w; crew's on-disk format changed (%s)", path, err, layoutFile)
	}
	tp, err := parseTemplate(b, path)
	if err != nil {
		return nil, nil, fmt.Errorf("layout check: %w", err)
	}
	if s := tp.str("state"); s != "running" {
		return nil, nil, fmt.Errorf("layout check: %s says state %q, crew status --json said running", path, s)
	}
	var comps []companion
	for _, p := range filesNamedAfter(root, id) {
		if p == path {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("layout check: copy %s: %w", p, err)
		}
		rel, _ := filepath.Rel(root, p)
		comps = append(comps, companion{rel: strings.ReplaceAll(rel, id, idMark), data: data})
	}
	return tp, comps, nil
}

// layoutError says that crew did not put a file where layout.go expects
// it, and where files of that run are instead.
func layoutError(root, id, what, want string) error {
	var found []string
	for _, p := range filesNamedAfter(root, id) {
		rel, _ := filepath.Rel(root, p)
		found = append(found, rel)
	}
	rel, _ := filepath.Rel(root, want)
	return fmt.Errorf("crew's state-root layout changed: the %s of run %s is not at %s (docs/state-root.md documents %s and %s); files of that run in %s: %v. Update %s (and docs/state-root.md) to crew's layout",
		what, id, rel, doneLayoutDoc, activeLayoutDoc, root, found, layoutFile)
}

// filesNamedAfter lists the regular files under root whose name contains
// the run id.
func filesNamedAfter(root, id string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(d.Name(), id) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func isFile(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

func companionNames(cs []companion) string {
	if len(cs) == 0 {
		return "no other files"
	}
	var names []string
	for _, c := range cs {
		names = append(names, c.rel)
	}
	return strings.Join(names, ", ")
}
