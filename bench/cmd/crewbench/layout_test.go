package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunIDFormat(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 2, 11, 123456789, time.UTC)
	id := newRunID(at, rand.New(rand.NewPCG(1, 2)))
	if !isRunID(id) || id[:29] != "r-20261129T100211.123456789Z-" {
		t.Fatalf("run id %q", id)
	}
	if got, err := runIDTime(id); err != nil || !got.Equal(at) {
		t.Fatalf("runIDTime(%q) = %v, %v; want %v", id, got, err, at)
	}
	if d := shardOf(id); d != "2026-11-29T10" {
		t.Fatalf("shard %q", d)
	}
	want := filepath.Join("R", "runs", "done", "2026-11-29T10", id+".run")
	if got := donePath("R", id); got != want {
		t.Fatalf("donePath = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "r-20261129T100211Z-3f2a", id + "0", "x" + id[1:], id[:len(id)-1] + "G"} {
		if isRunID(bad) {
			t.Errorf("isRunID(%q) = true", bad)
		}
	}
}

// A dead run is the record plus a copy of every companion file, with the
// id put in.
func TestWriteDead(t *testing.T) {
	root := t.TempDir()
	tp, err := parseTemplate([]byte("{\n  \"runId\": \"x\",\n  \"task\": \"t\",\n  \"createdAt\": null,\n  \"startedAt\": null,\n  \"finishedAt\": null\n}\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	s := &crewSample{active: tp, companions: []companion{{rel: filepath.Join("owners", idMark+".lock")}, {rel: filepath.Join("logs", idMark+".log"), data: []byte("out")}}}
	if err := writeDead(root, s, 3); err != nil {
		t.Fatal(err)
	}
	recs, _ := filepath.Glob(filepath.Join(activeDir(root), "r-*.run"))
	if len(recs) != 3 || countFiles(root) != 9 {
		t.Fatalf("%d records, %d files; want 3 and 9", len(recs), countFiles(root))
	}
	id := strings.TrimSuffix(filepath.Base(recs[0]), ".run")
	if b, err := os.ReadFile(filepath.Join(root, "logs", id+".log")); err != nil || string(b) != "out" {
		t.Fatalf("log of %s: %q, %v", id, b, err)
	}
}

// A dead run's record names its own lock files (device and inode), as a
// real run's does: crew treats a record whose lock file is not the one it
// names as possibly alive.
func TestWriteDeadNamesItsOwnLocks(t *testing.T) {
	root := t.TempDir()
	tp, err := parseTemplate([]byte("{\n  \"runId\": \"x\",\n  \"task\": \"t\",\n  \"createdAt\": null,\n  \"startedAt\": null,\n  \"finishedAt\": null,\n  \"locks\": {\n    \"owner\": {\n      \"dev\": 1,\n      \"ino\": 2\n    },\n    \"supervisor\": {\n      \"dev\": 1,\n      \"ino\": 3\n    }\n  }\n}\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	s := &crewSample{active: tp, companions: []companion{{rel: filepath.Join("owners", idMark+".lock")}, {rel: filepath.Join("owners", idMark+".supervisor.lock")}}}
	if err := writeDead(root, s, 2); err != nil {
		t.Fatal(err)
	}
	recs, _ := filepath.Glob(filepath.Join(activeDir(root), "r-*.run"))
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, rec := range recs {
		id := strings.TrimSuffix(filepath.Base(rec), ".run")
		b, err := os.ReadFile(rec)
		if err != nil {
			t.Fatal(err)
		}
		if b, err = recordOfFile(b); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Locks struct{ Owner, Supervisor fileID } `json:"locks"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]fileID{"owner": got.Locks.Owner, "supervisor": got.Locks.Supervisor} {
			file := id + ".lock"
			if name == "supervisor" {
				file = id + ".supervisor.lock"
			}
			fid, err := fileIDOf(filepath.Join(root, "owners", file))
			if err != nil {
				t.Fatal(err)
			}
			if want != fid {
				t.Errorf("%s: record names %s lock %+v, the file is %+v", id, name, want, fid)
			}
		}
	}
}
