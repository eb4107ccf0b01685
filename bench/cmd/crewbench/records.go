package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The harness writes state-root files itself (100,000 finished runs,
// 10,000 dead ones) instead of calling crew that many times. It never
// invents the format: it copies a record crew wrote, keeps every field and
// its order, and changes only the identity and the times. The copy is
// checked to round-trip byte for byte before it is used.

// field is one member of a JSON object, value kept verbatim.
type field struct {
	key string
	val json.RawMessage
}

// object is a JSON object that keeps its members' order.
type object []field

func parseObject(b []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("unexpected %v", tok)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		o = append(o, field{key, raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return o, nil
}

func (o object) get(key string) (json.RawMessage, bool) {
	for _, f := range o {
		if f.key == key {
			return f.val, true
		}
	}
	return nil, false
}

// with returns a copy with key set to v. The key must exist: a template
// that lacks it means the format changed, and the harness says so instead
// of writing something crew never wrote.
func (o object) with(key string, v any) (object, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make(object, len(o))
	copy(out, o)
	for i := range out {
		if out[i].key == key {
			out[i].val = b
			return out, nil
		}
	}
	return nil, fmt.Errorf("record template has no %q field; has crew's record format changed?", key)
}

// encode renders the object as crew does: json.MarshalIndent with two
// spaces, and a final newline.
func (o object) encode() ([]byte, error) {
	var compact bytes.Buffer
	compact.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			compact.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		compact.Write(k)
		compact.WriteByte(':')
		if err := json.Compact(&compact, f.val); err != nil {
			return nil, err
		}
	}
	compact.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// template is a record crew wrote, ready to be copied.
type template struct {
	obj  object
	path string // where crew wrote it
}

func loadTemplate(path string) (*template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	o, err := parseObject(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	again, err := o.encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(again, b) {
		return nil, fmt.Errorf("record %s does not round-trip byte for byte through the harness's encoder; crew's on-disk format changed (expected json.MarshalIndent with two spaces)", path)
	}
	return &template{obj: o, path: path}, nil
}

const runIDLayout = "20060102T150405.000000000Z"

// newRunID makes a run id in crew's format for a run created at t:
// r-YYYYMMDDTHHMMSS.NNNNNNNNNZ-<16 hex>.
func newRunID(t time.Time, rnd *rand.Rand) string {
	return "r-" + t.UTC().Format(runIDLayout) + fmt.Sprintf("-%016x", rnd.Uint64())
}

// shardOf is the finished-runs shard of a run id: its UTC creation hour,
// YYYY-MM-DDTHH (runstore.RunID.Shard).
func shardOf(id string) string { return id[2:6] + "-" + id[6:8] + "-" + id[8:10] + "T" + id[11:13] }

// instance fills the template for a run created at t. Times present in
// the template (not null) move with t; null ones stay null.
func (tp *template) instance(id, task string, t time.Time) ([]byte, error) {
	o, err := tp.obj.with("runId", id)
	if err != nil {
		return nil, err
	}
	if o, err = o.with("task", task); err != nil {
		return nil, err
	}
	if o, err = o.with("createdAt", t.UTC()); err != nil {
		return nil, err
	}
	for key, d := range map[string]time.Duration{"startedAt": 2 * time.Millisecond, "finishedAt": 5 * time.Millisecond} {
		v, ok := o.get(key)
		if !ok {
			return nil, fmt.Errorf("record template has no %q field", key)
		}
		if string(v) != "null" {
			if o, err = o.with(key, t.Add(d).UTC()); err != nil {
				return nil, err
			}
		}
	}
	return o.encode()
}

// templates makes crew write a finished record and an active (running)
// record in a scratch state root, and loads them.
func (h *harness) templates() (done, active *template, err error) {
	if h.doneT != nil {
		return h.doneT, h.activeT, nil
	}
	defer func() {
		if err == nil {
			h.doneT, h.activeT = done, active
		}
	}()
	root := h.path("roots", "template")
	if _, err := output(h.env, h.crew, "--root", root, "init", "--max", "4"); err != nil {
		return nil, nil, err
	}
	for i := range 3 {
		if _, err := output(h.env, h.crew, "--root", root, "start", fmt.Sprintf("tmpl-%d", i), "--", "true"); err != nil {
			return nil, nil, err
		}
	}
	dones, _ := filepath.Glob(filepath.Join(root, "runs", "done", "*", "r-*.json"))
	if len(dones) == 0 {
		return nil, nil, fmt.Errorf("crew wrote no finished record under %s/runs/done", root)
	}
	if done, err = loadTemplate(dones[len(dones)-1]); err != nil {
		return nil, nil, err
	}

	// An active record: run `crew start x -- sleep 5`, copy its record
	// once it says running, then stop it (SIGTERM is forwarded; the run
	// is recorded as stopped).
	cmd := exec.Command(h.crew, "--root", root, "start", "tmpl-active", "--", "sleep", "5")
	cmd.Env = h.env
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for active == nil && time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(root, "runs", "active", "r-*.json"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil || !bytes.Contains(b, []byte(`"state": "running"`)) {
				continue
			}
			// Copy it first: the live file will change when the run ends.
			cp := h.path("tmp", "active-template.json")
			if err := os.WriteFile(cp, b, 0o600); err != nil {
				return nil, nil, err
			}
			if active, err = loadTemplate(cp); err != nil {
				return nil, nil, err
			}
			active.path = f
		}
		if active == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if active == nil {
		return nil, nil, fmt.Errorf("no running record appeared in %s/runs/active within 5s", root)
	}
	return done, active, nil
}

// writeHistory writes n finished runs into root's runs/done/<shard>/, ids
// created at times from times(i), without fsync (it is set-up, not a run).
func writeHistory(root string, tp *template, n int, times func(i int) time.Time) error {
	rnd := rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))
	ids := make([]string, n)
	shards := map[string]bool{}
	for i := range n {
		ids[i] = newRunID(times(i), rnd)
		shards[shardOf(ids[i])] = true
	}
	doneDir := filepath.Join(root, "runs", "done")
	for d := range shards {
		if err := os.MkdirAll(filepath.Join(doneDir, d), 0o700); err != nil {
			return err
		}
	}
	return parallelDo(n, 4, func(i int) error {
		id := ids[i]
		b, err := tp.instance(id, fmt.Sprintf("hist-%d", i%50), times(i))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(doneDir, shardOf(id), id+".json"), b, 0o600)
	})
}

// writeDead writes n dead runs into root: an active record in state
// running per run, plus its two owner-lock files, empty and held by
// nobody, exactly what a supervisor killed with SIGKILL (and its command
// gone too) leaves behind.
func writeDead(root string, tp *template, n int) error {
	rnd := rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))
	base := time.Now().Add(-time.Duration(n+1) * time.Millisecond)
	active, owners := filepath.Join(root, "runs", "active"), filepath.Join(root, "owners")
	for _, d := range []string{active, owners} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = newRunID(base.Add(time.Duration(i)*time.Millisecond), rnd)
	}
	return parallelDo(n, 4, func(i int) error {
		id := ids[i]
		b, err := tp.instance(id, fmt.Sprintf("dead-%05d", i), base.Add(time.Duration(i)*time.Millisecond))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(active, id+".json"), b, 0o600); err != nil {
			return err
		}
		for _, suffix := range []string{".lock", ".supervisor.lock"} {
			if err := os.WriteFile(filepath.Join(owners, id+suffix), nil, 0o600); err != nil {
				return err
			}
		}
		return nil
	})
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
	doneT, activeT, err := h.templates()
	if err != nil {
		return err
	}
	prepare := func(root string) error {
		if _, err := os.Stat(root); err == nil {
			return fmt.Errorf("%s exists; give a new directory", root)
		}
		return h.initRoot(root, 4)
	}
	if root := h.cfg.makeDead; root != "" {
		if err := prepare(root); err != nil {
			return err
		}
		if err := writeDead(root, activeT, h.cfg.dead); err != nil {
			return err
		}
		fmt.Printf("%s: %d dead runs\n", root, h.cfg.dead)
	}
	if root := h.cfg.makeHistory; root != "" {
		if err := prepare(root); err != nil {
			return err
		}
		now := time.Now()
		n := h.cfg.history
		span := now.Sub(now.UTC().Truncate(24 * time.Hour))
		if err := writeHistory(root, doneT, n, func(i int) time.Time { return now.Add(-time.Duration(i+1) * (span / time.Duration(n+1))) }); err != nil {
			return err
		}
		fmt.Printf("%s: %d finished runs\n", root, n)
	}
	return nil
}
