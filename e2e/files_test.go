package e2e

// Issue 10, items 4-6: no file type, size or link in the state root can
// hang crew or lead it outside the root.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hangLimit bounds every crew call in these tests: far above anything
// crew needs, so only a hang reaches it.
const hangLimit = 60 * time.Second

// plantedID is a run id no crew made; its shard is plantedShard.
const (
	plantedID    = "r-20260101T000000.000000000Z-00000000000000f1"
	plantedShard = "2026-01-01T00"
)

func mkfifoAt(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
}

func symlinkAt(t *testing.T, target, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.Symlink(target, path))
}

func hardlinkAt(t *testing.T, target, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.Link(target, path))
}

// sparseAt makes a file of size bytes that takes no disk space.
func sparseAt(t *testing.T, path string, size int64) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
}

// Item 4: a FIFO where a record, a ticket or the config belongs blocked
// every reader forever (crew start inside the admission lock, so every
// later start timed out too). Now every command answers, and the FIFO is
// reported (and quarantined by recover where it is in the active set).
func TestFIFOsInTheStateRootDoNotHang(t *testing.T) {
	cases := map[string]string{
		"active record":          "runs/active/" + plantedID + ".json",
		"finished record":        "runs/done/" + plantedShard + "/" + plantedID + ".json",
		"active record (.run)":   "runs/active/" + plantedID + ".run",
		"finished record (.run)": "runs/done/" + plantedShard + "/" + plantedID + ".run",
		"queue ticket":           "queue/" + plantedID + ".json",
		"config":                 "crew.json",
	}
	for name, rel := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(2)
			path := filepath.Join(e.root, rel)
			if rel == "crew.json" {
				require.NoError(t, os.Remove(path))
			}
			mkfifoAt(t, path)
			for _, args := range [][]string{
				{"start", "x", "--", "true"},
				{"start", "--wait=5s", "y", "--", "true"},
				{"status"}, {"status", "--json"}, {"status", plantedID}, {"status", "x"},
				{"wait", "--timeout", "2s", plantedID}, {"logs", plantedID}, {"stop", "--grace", "1s", plantedID},
				{"recover", "--dry-run"}, {"recover"}, {"prune", "--keep", "1"}, {"init"},
			} {
				r := e.bounded(hangLimit, nil, args...)
				if rel == "crew.json" && args[0] == "start" {
					assert.Equal(t, 125, r.Code, "%v: %s", args, r.Stderr)
					assert.Contains(t, r.Stderr, "crew.json is a FIFO, not a regular file", args)
				}
				if rel != "crew.json" && args[0] == "start" {
					assert.Equal(t, 0, r.Code, "%v: a FIFO does not stop admission: %s", args, r.Stderr)
				}
			}
			if strings.HasPrefix(rel, "runs/active/") {
				fi, err := os.Lstat(filepath.Join(e.root, "quarantine", filepath.Base(rel)))
				require.NoError(t, err, "recover quarantines the FIFO")
				assert.Equal(t, os.ModeNamedPipe, fi.Mode().Type())
			}
		})
	}
}

// Item 5: a record linked to /dev/zero was read without limit inside the
// admission lock (until the OOM killer came), a huge record was read on
// every admission, and a record linked to a secret leaked its first
// character into warnings. Now none of them is read at all.
func TestRecordsThatAreDevicesLinksOrHugeAreNotRead(t *testing.T) {
	for _, ext := range []string{".json", ".run"} {
		t.Run(ext, func(t *testing.T) { recordsThatAreNotFilesAreNotRead(t, ext) })
	}
}

func recordsThatAreNotFilesAreNotRead(t *testing.T, ext string) {
	e := newEnv(t)
	e.initMax(2)
	c := newCanaries(t, filepath.Dir(e.root), map[string]string{"secret": "QXZ-secret-canary"})
	active := filepath.Join(e.root, "runs", "active")
	ids := []string{
		"r-20260101T000000.000000000Z-00000000000000a1",
		"r-20260101T000000.000000000Z-00000000000000a2",
		"r-20260101T000000.000000000Z-00000000000000a3",
		"r-20260101T000000.000000000Z-00000000000000a4",
	}
	symlinkAt(t, "/dev/zero", filepath.Join(active, ids[0]+ext))
	sparseAt(t, filepath.Join(active, ids[1]+ext), 200<<20)
	symlinkAt(t, c.file("secret"), filepath.Join(active, ids[2]+ext))
	hardlinkAt(t, c.file("secret"), filepath.Join(active, ids[3]+ext))
	c.before = c.snapshot() // the hard link changed the canary's ctime and link count only

	for _, args := range [][]string{
		{"start", "x", "--", "true"}, {"status"}, {"status", "--json"}, {"status", ids[3]},
		{"wait", "--timeout", "2s", ids[0]}, {"logs", ids[2]}, {"stop", "--grace", "1s", ids[3]},
		{"recover", "--dry-run"}, {"recover"},
	} {
		r := e.bounded(hangLimit, nil, args...)
		out := r.Stdout + r.Stderr
		assert.NotContains(t, out, "QXZ", "%v leaked the secret", args)
		assert.NotContains(t, out, "'Q'", "%v leaked the secret's first character", args)
		if args[0] == "start" {
			assert.Equal(t, 0, r.Code, r.Stderr)
			assert.Contains(t, r.Stderr, ids[0]+ext+" is a symbolic link, not a regular file")
			assert.Contains(t, r.Stderr, ids[1]+ext+" is 209715200 bytes, over the limit")
			assert.Contains(t, r.Stderr, ids[3]+ext+" has 2 hard links")
		}
	}
	for _, id := range ids {
		_, err := os.Lstat(filepath.Join(e.root, "quarantine", id+ext))
		assert.NoError(t, err, "recover quarantined %s", id)
	}
	c.assertUnchanged("after every command")
}

// Item 6: links planted where crew writes or reads in place. Each was
// followed: the holder note overwrote a file outside, a refusal was
// appended outside, crew logs printed a file outside, and recover moved an
// outside directory's files into the state root.
func TestPlantedLinksAreNeverFollowed(t *testing.T) {
	type plant func(t *testing.T, target, path string)
	kinds := map[string]plant{"symlink": symlinkAt, "hard link": hardlinkAt}
	for kind, plantLink := range kinds {
		t.Run("holder note/"+kind, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(1)
			c := newCanaries(t, filepath.Dir(e.root), map[string]string{"target": "holder-canary"})
			holder := filepath.Join(e.root, ".locks", "dispatch-admission.holder")
			require.NoError(t, os.Remove(holder))
			plantLink(t, c.file("target"), holder)
			c.before = c.snapshot()
			r := e.bounded(hangLimit, nil, "start", "x", "--", "true")
			assert.Equal(t, 0, r.Code, "a planted holder note does not stop admission: %s", r.Stderr)
			c.assertUnchanged("after crew start")
			fi, err := os.Lstat(holder)
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "a fresh holder note replaced the link")
			assertQuarantined(t, e.root, "dispatch-admission.holder")
		})
		t.Run("refusals log/"+kind, func(t *testing.T) {
			e := newEnv(t)
			e.initMax(1)
			c := newCanaries(t, filepath.Dir(e.root), map[string]string{
				"target": `{"at":"2026-01-01T00:00:00Z","task":"y","reason":"QXZ planted","exitCode":75,"pid":1}` + "\n",
			})
			plantLink(t, c.file("target"), filepath.Join(e.root, "refusals.log"))
			c.before = c.snapshot()
			release, _ := e.holdSlot("holder")
			defer release()
			r := e.bounded(hangLimit, nil, "start", "y", "--", "true")
			assert.Equal(t, 75, r.Code, r.Stderr)
			r = e.bounded(hangLimit, nil, "status", "y")
			assert.Equal(t, 0, r.Code, r.Stderr)
			assert.NotContains(t, r.Stdout, "QXZ", "status read the refusal log through the link")
			c.assertUnchanged("after a refused start and crew status")
		})
		t.Run("crew logs/"+kind, func(t *testing.T) {
			e := newEnv(t)
			r := e.run("start", "--detach", "x", "--", "true")
			require.Equal(t, 0, r.Code, r.Stderr)
			id := strings.TrimSpace(r.Stdout)
			require.Equal(t, 0, e.run("wait", id).Code)
			c := newCanaries(t, filepath.Dir(e.root), map[string]string{"target": "QXZ-log-canary"})
			log := filepath.Join(e.root, "logs", id+".log")
			require.NoError(t, os.Remove(log))
			plantLink(t, c.file("target"), log)
			c.before = c.snapshot()
			for _, args := range [][]string{{"logs", id}, {"logs", "-f", id}, {"logs", "x"}} {
				r = e.bounded(hangLimit, nil, args...)
				assert.NotEqual(t, 0, r.Code, "%v printed a planted log", args)
				assert.NotContains(t, r.Stdout+r.Stderr, "QXZ", "%v printed a file outside the root", args)
				assert.Contains(t, r.Stderr, id+".log", "%v names the log", args)
			}
			c.assertUnchanged("after crew logs")
		})
	}
	t.Run("recover with runs/active linked outside", func(t *testing.T) {
		e := newEnv(t)
		e.initMax(1)
		record := `{"version":1,"runId":"` + plantedID + `","task":"t","state":"running","command":["true"],"host":"h","createdAt":"2026-01-01T00:00:00Z","supervisorPid":1}`
		c := newCanaries(t, filepath.Dir(e.root), map[string]string{plantedID + ".json": record, "other": "x"})
		active := filepath.Join(e.root, "runs", "active")
		require.NoError(t, os.Remove(active))
		symlinkAt(t, c.dir, active)
		c.before = c.snapshot()
		// prune has nothing to remove here (and never needs the active set
		// but to leave a run alone); it must not touch the canaries either.
		e.bounded(hangLimit, nil, "prune", "--keep", "1")
		for _, args := range [][]string{{"recover"}, {"recover", "--dry-run"}, {"start", "x", "--", "true"}, {"status"}} {
			r := e.bounded(hangLimit, nil, args...)
			assert.Equal(t, 125, r.Code, "%v: %s", args, r.Stderr)
			assert.Contains(t, r.Stderr, active+" is a symbolic link, not a directory", args)
		}
		c.assertUnchanged("after recover")
		assert.NoDirExists(t, filepath.Join(e.root, "quarantine", plantedID+".json"))
	})
}

// assertQuarantined checks that quarantine/ holds name and a note on why.
func assertQuarantined(t *testing.T, root, name string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "quarantine"))
	require.NoError(t, err, "quarantine/")
	var moved, why bool
	for _, ent := range entries {
		n := ent.Name()
		switch {
		case strings.HasSuffix(n, ".why") && strings.HasPrefix(n, name):
			why = true
		case strings.HasPrefix(n, name):
			moved = true
		}
	}
	assert.True(t, moved && why, "quarantine/ holds %s and its .why note: %v", name, entries)
}

// Item 6: the run id of a waiting start is readable in queue/ before it
// is admitted, so its log can be planted. Whatever is planted, the run's
// output goes to a fresh log of its own, and the planted thing is moved
// aside into quarantine/ with a note and a warning.
func TestPlantedLogOfAQueuedRun(t *testing.T) {
	plants := map[string]func(t *testing.T, c *canaries, path string){
		"regular file": func(t *testing.T, _ *canaries, path string) {
			require.NoError(t, os.WriteFile(path, []byte("QXZ-planted\n"), 0o600))
		},
		"symlink":          func(t *testing.T, c *canaries, path string) { symlinkAt(t, c.file("target"), path) },
		"dangling symlink": func(t *testing.T, c *canaries, path string) { symlinkAt(t, c.file("nothing-here"), path) },
		"hard link":        func(t *testing.T, c *canaries, path string) { hardlinkAt(t, c.file("target"), path) },
		"FIFO":             func(t *testing.T, _ *canaries, path string) { mkfifoAt(t, path) },
		"directory":        func(t *testing.T, _ *canaries, path string) { require.NoError(t, os.Mkdir(path, 0o700)) },
	}
	for name, plant := range plants {
		for _, detach := range []bool{false, true} {
			sub := name
			if detach {
				sub += "/detach"
			}
			t.Run(sub, func(t *testing.T) {
				e := newEnv(t)
				e.initMax(1)
				c := newCanaries(t, filepath.Dir(e.root), map[string]string{"target": "QXZ-canary"})
				release, _ := e.holdSlot("holder")
				args := []string{"start", "--wait=60s"}
				if detach {
					args = append(args, "--detach")
				}
				p := e.start(nil, append(args, "queued", "--", "echo", "from-the-run")...)
				e.waitQueued("queued")
				var id string
				for _, q := range e.queue().Queue {
					if q.Task == "queued" {
						id = q.RunID
					}
				}
				log := filepath.Join(e.root, "logs", id+".log")
				plant(t, c, log)
				c.before = c.snapshot()
				release()
				r := p.wait(t, hangLimit)
				require.Equal(t, 0, r.Code, r.Stderr)
				if detach {
					require.Equal(t, 0, e.bounded(hangLimit, nil, "wait", id).Code)
				} else {
					assert.Contains(t, r.Stderr, "crew: queued: warning: ")
					assert.Contains(t, r.Stderr, log+" existed before the run started")
					assert.Contains(t, r.Stderr, "moved it to "+filepath.Join(e.root, "quarantine"))
				}
				st := e.bounded(hangLimit, nil, "status", "--json", id)
				assert.Contains(t, st.Stdout, "quarantine", "the run's history says its log was planted")
				b, err := os.ReadFile(log)
				require.NoError(t, err)
				assert.Equal(t, "from-the-run\n", string(b), "the run wrote a fresh log of its own")
				lr := e.bounded(hangLimit, nil, "logs", id)
				assert.Equal(t, "from-the-run\n", lr.Stdout)
				assertQuarantined(t, e.root, id+".log")
				c.assertUnchanged("after the run")
			})
		}
	}
}
