package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The harness writes state-root files itself (100,000 finished runs,
// 10,000 dead ones) instead of calling crew that many times: copies of the
// records and files crew itself wrote at start-up (probe.go), at the places
// layout.go names.

// writeHistory writes n finished runs into root, ids created at times(i),
// without fsync (it is set-up, not a run).
func writeHistory(root string, tp *template, n int, times func(i int) time.Time) error {
	rnd := rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))
	ids := make([]string, n)
	dirs := map[string]bool{}
	for i := range n {
		ids[i] = newRunID(times(i), rnd)
		dirs[filepath.Dir(donePath(root, ids[i]))] = true
	}
	for d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
	}
	return parallelDo(n, 4, func(i int) error {
		id := ids[i]
		b, err := tp.instance(id, fmt.Sprintf("hist-%d", i%50), times(i))
		if err != nil {
			return fmt.Errorf("write history: %w", err)
		}
		return os.WriteFile(donePath(root, id), recordFile(b), 0o600)
	})
}

// writeDead writes n dead runs into root: per run, an active record in
// state running and a copy of every other file a live run had (owner lock
// files, held by nobody; its log): exactly what a supervisor and command
// killed with SIGKILL leave behind.
func writeDead(root string, s *crewSample, n int) error {
	rnd := rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))
	base := time.Now().Add(-time.Duration(n+1) * time.Millisecond)
	ids := make([]string, n)
	for i := range n {
		ids[i] = newRunID(base.Add(time.Duration(i)*time.Millisecond), rnd)
	}
	dirs := []string{activeDir(root)}
	for _, c := range s.companions {
		dirs = append(dirs, filepath.Dir(filepath.Join(root, c.rel)))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("write dead runs: %w", err)
		}
	}
	return parallelDo(n, 4, func(i int) error {
		return writeDeadRun(root, s, ids[i], fmt.Sprintf("dead-%05d", i), base.Add(time.Duration(i)*time.Millisecond))
	})
}

func writeDeadRun(root string, s *crewSample, id, task string, at time.Time) error {
	for _, c := range s.companions {
		p := filepath.Join(root, strings.ReplaceAll(c.rel, idMark, id))
		if err := os.WriteFile(p, c.data, 0o600); err != nil {
			return fmt.Errorf("write dead run: %w", err)
		}
	}
	b, err := s.active.instance(id, task, at)
	if err != nil {
		return fmt.Errorf("write dead run: %w", err)
	}
	if b, err = withOwnLocks(b, root, id); err != nil {
		return fmt.Errorf("write dead run: %w", err)
	}
	if err := os.WriteFile(activePath(root, id), recordFile(b), 0o600); err != nil {
		return fmt.Errorf("write dead run: %w", err)
	}
	return nil
}

// withOwnLocks points a dead record's "locks" at the lock files written
// for it, as a real run's record names its own: the template's are the
// sampled run's, long removed, and crew (rightly) takes a record whose lock
// file is not the one it names as possibly alive while anything holds a
// lock on the named inode, which a later file may reuse. Without this,
// recover found some fabricated runs "orphaned" whenever it held the lock
// of another dead run whose file had the sampled inode number. A record
// without "locks" (a template from a crew that wrote none) stays as it is.
func withOwnLocks(b []byte, root, id string) ([]byte, error) {
	tp, err := parseTemplate(b, "dead run")
	if err != nil {
		return nil, err
	}
	if _, ok := tp.obj.get("locks"); !ok {
		return b, nil
	}
	owner, err := fileIDOf(filepath.Join(root, "owners", id+".lock"))
	if err != nil {
		return nil, err
	}
	sup, err := fileIDOf(filepath.Join(root, "owners", id+".supervisor.lock"))
	if err != nil {
		return nil, err
	}
	o, err := tp.obj.with("locks", map[string]any{"owner": owner, "supervisor": sup})
	if err != nil {
		return nil, err
	}
	return o.encode()
}

type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func fileIDOf(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no device and inode", path)
	}
	return fileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// parallelDo runs f(0..n-1) on w goroutines and returns the first error.
func parallelDo(n, w int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, w)
	for k := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n; i += w {
				if err := f(i); err != nil {
					errs[k] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// countFiles counts the regular non-dot files under dir, recursively.
func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			n++
		}
		return nil
	})
	return n
}

// makeRoots serves -make-dead and -make-history: state roots to profile
// crew on by hand, e.g. `perf record -g crew --root DIR recover`.
func (h *harness) makeRoots() error {
	if root := h.cfg.makeDead; root != "" {
		if err := h.newRoot(root); err != nil {
			return err
		}
		if err := writeDead(root, h.sample, h.cfg.dead); err != nil {
			return err
		}
		fmt.Printf("%s: %d dead runs\n", root, h.cfg.dead)
	}
	if root := h.cfg.makeHistory; root != "" {
		now := time.Now()
		n := h.cfg.history
		span := now.Sub(now.UTC().Truncate(24 * time.Hour))
		times := func(i int) time.Time { return now.Add(-time.Duration(i+1) * (span / time.Duration(n+1))) }
		if h.cfg.historyLayout != "today" {
			times = nil
			for _, l := range historyLayouts(n) {
				if l.name == h.cfg.historyLayout {
					times = l.times
				}
			}
			if times == nil {
				return fmt.Errorf("-history-layout %q: want today, %s", h.cfg.historyLayout, strings.Join(historyNames[1:], " or "))
			}
		}
		if err := h.newRoot(root); err != nil {
			return err
		}
		if err := writeHistory(root, h.sample.done, n, times); err != nil {
			return err
		}
		if err := h.indexHistory(root); err != nil {
			return err
		}
		fmt.Printf("%s: %d finished runs\n", root, n)
	}
	return nil
}

func (h *harness) newRoot(root string) error {
	if _, err := os.Stat(root); err == nil {
		return fmt.Errorf("%s exists; give a new directory", root)
	}
	return h.initRoot(root, 4)
}
