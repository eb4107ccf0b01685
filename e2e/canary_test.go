package e2e

// Canaries: files and a directory outside the state root that planted
// links and hard links point at. A test asserts they are exactly as
// planted afterwards: crew never writes, reads, moves or creates anything
// outside the state root because of what is inside it.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// canaryState is what a canary file looks like: its content, mtime and
// atime, and (for the directory) the names it holds.
type canaryState struct {
	content string
	mtime   time.Time
	atime   time.Time
	names   string
}

// canaries is a directory outside the state root with files in it.
type canaries struct {
	t   *testing.T
	dir string // the canary directory itself
	// atimeWorks: the mount records reads in atime (relatime updates it
	// when atime is older than mtime, which plant arranges).
	atimeWorks bool
	before     map[string]canaryState
}

// newCanaries makes the canary directory under base with the given files.
// Every file gets an atime an hour before its mtime, so that on a relatime
// mount any read moves it.
func newCanaries(t *testing.T, base string, files map[string]string) *canaries {
	t.Helper()
	c := &canaries{t: t, dir: filepath.Join(base, "canary"), before: map[string]canaryState{}}
	require.NoError(t, os.MkdirAll(c.dir, 0o700))
	for name, content := range files {
		require.NoError(t, os.WriteFile(c.file(name), []byte(content), 0o600))
	}
	// Does a read show in atime here? Try it on a probe file of our own,
	// outside the canary directory.
	probe := filepath.Join(base, "atime-probe")
	require.NoError(t, os.WriteFile(probe, []byte("probe"), 0o600))
	c.age(probe)
	before := c.state(probe).atime
	_, err := os.ReadFile(probe)
	require.NoError(t, err)
	c.atimeWorks = c.state(probe).atime.After(before)
	require.NoError(t, os.Remove(probe))
	if !c.atimeWorks {
		t.Log("this mount does not record reads in atime: canary reads are not checked")
	}
	for name := range files {
		c.age(c.file(name))
	}
	c.before = c.snapshot()
	return c
}

func (c *canaries) file(name string) string { return filepath.Join(c.dir, name) }

// age sets a file's mtime to a fixed past instant and its atime an hour
// before that.
func (c *canaries) age(path string) {
	mtime := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	require.NoError(c.t, os.Chtimes(path, mtime.Add(-time.Hour), mtime))
}

func (c *canaries) state(path string) canaryState {
	var st syscall.Stat_t
	require.NoError(c.t, syscall.Lstat(path, &st))
	b, err := os.ReadFile(path)
	require.NoError(c.t, err)
	return canaryState{content: string(b), mtime: mtimeOf(&st), atime: atimeOf(&st)}
}

// snapshot reads every canary's stat before its content (reading moves
// atime, so the stat comes first and the content read is undone).
func (c *canaries) snapshot() map[string]canaryState {
	out := map[string]canaryState{}
	entries, err := os.ReadDir(c.dir)
	require.NoError(c.t, err)
	var names []string
	for _, ent := range entries {
		names = append(names, ent.Name())
		path := c.file(ent.Name())
		var s syscall.Stat_t
		require.NoError(c.t, syscall.Lstat(path, &s))
		cs := canaryState{mtime: mtimeOf(&s), atime: atimeOf(&s)}
		if s.Mode&syscall.S_IFMT == syscall.S_IFREG {
			b, err := os.ReadFile(path)
			require.NoError(c.t, err)
			cs.content = string(b)
			// Put the atime back where it was: our own read is no evidence.
			require.NoError(c.t, os.Chtimes(path, cs.atime, cs.mtime))
		}
		out[ent.Name()] = cs
	}
	sort.Strings(names)
	var dir syscall.Stat_t
	require.NoError(c.t, syscall.Lstat(c.dir, &dir))
	out["."] = canaryState{names: strings.Join(names, "\n"), mtime: mtimeOf(&dir)}
	return out
}

// assertUnchanged fails the test if anything in the canary directory was
// written, read (where atime tells), created, removed or renamed.
func (c *canaries) assertUnchanged(when string) {
	c.t.Helper()
	now := c.snapshot()
	if now["."].names != c.before["."].names {
		c.t.Errorf("%s: the canary directory %s changed: had\n%s\nnow has\n%s", when, c.dir, c.before["."].names, now["."].names)
	}
	if !now["."].mtime.Equal(c.before["."].mtime) {
		c.t.Errorf("%s: the canary directory %s was modified (mtime %s, was %s)", when, c.dir, now["."].mtime, c.before["."].mtime)
	}
	for name, was := range c.before {
		if name == "." {
			continue
		}
		is, ok := now[name]
		switch {
		case !ok:
			c.t.Errorf("%s: canary %s is gone", when, name)
		case is.content != was.content:
			c.t.Errorf("%s: canary %s was written: %q, was %q", when, name, trunc(is.content), trunc(was.content))
		case !is.mtime.Equal(was.mtime):
			c.t.Errorf("%s: canary %s was modified (mtime %s, was %s)", when, name, is.mtime, was.mtime)
		case c.atimeWorks && !is.atime.Equal(was.atime):
			c.t.Errorf("%s: canary %s was read (atime %s, was %s)", when, name, is.atime, was.atime)
		}
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// bounded runs crew and fails the test if it does not exit within limit:
// a hang is a failure, however the machine is loaded (the limit is
// generous; nothing here times performance). The process is crew itself,
// the test's own child, so killing it on a hang signals nobody else.
func (e *env) bounded(limit time.Duration, extraEnv []string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := e.command(extraEnv, args...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(e.t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill() // our own child, not yet waited for
		<-done
		e.t.Fatalf("crew %q hung: no exit within %s; stderr so far:\n%s", args, limit, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else {
		require.NoError(e.t, err)
	}
	return result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}
