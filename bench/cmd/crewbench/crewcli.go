package main

import (
	"encoding/json"
	"fmt"
	"time"
)

// What the harness reads from crew's own output: `crew status --json`
// (schema version 1, documented in docs/json.md). Only the fields the
// harness uses are declared.

type statusRun struct {
	RunID     string    `json:"runId"`
	Task      string    `json:"task"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"createdAt"`
}

type statusSnapshot struct {
	Version    int               `json:"version"`
	SlotsInUse int               `json:"slotsInUse"`
	Active     []statusRun       `json:"active"`
	Finished   []statusRun       `json:"finished"`
	Queue      []json.RawMessage `json:"queue"`
	Problems   []json.RawMessage `json:"problems"`
}

// status runs `crew --root root status --json` and decodes it.
func (h *harness) status(root string) (*statusSnapshot, error) {
	out, err := output(h.env, h.crew, "--root", root, "status", "--json")
	if err != nil {
		return nil, err
	}
	var s statusSnapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return nil, fmt.Errorf("decode crew status --json of %s: %w: %s", root, err, tail([]byte(out), 300))
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("crew status --json of %s: schema version %d, the harness reads version 1", root, s.Version)
	}
	return &s, nil
}

// awaitStatus polls crew status --json of root until ok says so, for at
// most limit; it returns the last snapshot and whether ok was reached.
func (h *harness) awaitStatus(root string, limit time.Duration, ok func(*statusSnapshot) bool) (*statusSnapshot, error) {
	deadline := time.Now().Add(limit)
	for {
		s, err := h.status(root)
		if err != nil {
			return nil, err
		}
		if ok(s) {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("crew status --json of %s: condition not reached within %s (%d slots in use, %d active, %d queued)",
				root, limit, s.SlotsInUse, len(s.Active), len(s.Queue))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) initRoot(root string, max int) error {
	_, err := output(h.env, h.crew, "--root", root, "init", "--max", fmt.Sprint(max))
	return err
}

// indexHistory has crew index finished records the harness wrote behind
// its back (crew's index of finished runs lists only what crew finished
// or indexed): `crew recover`, as after copying a history in by hand.
func (h *harness) indexHistory(root string) error {
	_, err := output(h.env, h.crew, "--root", root, "recover", "--timeout", "30m")
	return err
}
