package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The ledger of a strace -f -y log in the shape strace prints (copied from
// a crew start, shortened): creations with and without O_EXCL, an
// O_CREAT open of a file that exists, a write, a rename over an existing
// file with data, an unlink of an empty file and of a written one, a
// split (unfinished / resumed) fsync, and files outside the root.
func TestReadLedger(t *testing.T) {
	const log = `100 openat(AT_FDCWD</w>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>
101 openat(8</R/.locks>, "holder", O_WRONLY|O_CREAT|O_NONBLOCK|O_CLOEXEC, 0600) = 13</R/.locks/holder>
101 pwrite64(13</R/.locks/holder>, "18627 2026"..., 256, 0) = 256
101 openat(8</R/owners>, "r-1.lock", O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 13</R/owners/r-1.lock>
101 openat(8</R/owners>, "r-1.supervisor.lock", O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 15</R/owners/r-1.supervisor.lock>
101 openat(18</R/runs/active>, ".r-1.json123", O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 17</R/runs/active/.r-1.json123>
101 write(17</R/runs/active/.r-1.json123>, "{\n  \"version\": 1, \"a, b\""..., 746) = 746
101 fsync(17</R/runs/active/.r-1.json123> <unfinished ...>
102 +++ exited with 0 +++
101 <... fsync resumed>)              = 0
101 renameat(18</R/runs/active>, ".r-1.json123", 18</R/runs/active>, "r-1.json") = 0
101 openat(7</R>, "runs/active.index", O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0600) = 18</R/runs/active.index>
101 openat(7</R>, "runs/fresh.index", O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0600) = 19</R/runs/fresh.index>
101 openat(8</R/logs>, "r-1.log", O_WRONLY|O_CREAT|O_EXCL|O_APPEND|O_CLOEXEC, 0600) = 9</R/logs/r-1.log>
101 openat(8</R/logs>, "r-2.log", O_WRONLY|O_CREAT|O_EXCL|O_APPEND|O_CLOEXEC, 0600) = -1 EEXIST (File exists)
101 openat(AT_FDCWD</w>, "/elsewhere/x", O_WRONLY|O_CREAT|O_EXCL, 0600) = 4</elsewhere/x>
101 fdatasync(4</elsewhere/x>) = 0
101 openat(18</R/runs/active>, ".r-1.json456", O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 17</R/runs/active/.r-1.json456>
101 write(17</R/runs/active/.r-1.json456>, "{}", 2) = 2
101 renameat(18</R/runs/active>, ".r-1.json456", 18</R/runs/active>, "r-1.json") = 0
101 renameat2(18</R/runs/active>, "r-1.json", 20</R/runs/done/h>, "r-1.json", RENAME_NOREPLACE) = 0
101 unlinkat(8</R/owners>, "r-1.supervisor.lock", 0) = 0
101 unlinkat(8</R/owners>, "r-1.lock", 0) = 0
101 unlinkat(8</R/owners>, "r-9.lock", 0) = -1 ENOENT (No such file or directory)
101 unlinkat(8</R/logs>, "r-0.log", 0) = 0
101 fsync(21</R/runs/done/h>) = 0
`
	known := map[string]*ledgerEntry{
		"/R": {data: true}, "/R/.locks/holder": {data: true}, "/R/runs/active.index": {data: true},
		"/R/logs/r-0.log": {data: false},
	}
	got := readLedger(log, "/R", known)
	// created: r-1.lock, r-1.supervisor.lock, .json123, fresh.index,
	// r-1.log, .json456 (holder and active.index exist; /elsewhere is
	// outside the root). freed: the rename of .json456 over r-1.json
	// (data), supervisor.lock (empty), r-1.lock (empty), r-0.log (empty).
	want := ledger{created: 6, freed: 4, freedWithData: 1, renames: 3, renamesOver: 1, fsyncs: 3}
	if got != want {
		t.Errorf("ledger = %+v, want %+v", got, want)
	}
}

func TestWalkRootThenMkdir(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "full"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	known, err := walkRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	log := "1 mkdirat(3<" + root + ">, \"d\", 0700) = 0\n" +
		"1 unlinkat(3<" + root + ">, \"full\", 0) = 0\n" +
		"1 unlinkat(3<" + root + ">, \"empty\", 0) = 0\n" +
		"1 unlinkat(3<" + root + ">, \"d\", AT_REMOVEDIR) = 0\n"
	got := readLedger(log, root, known)
	want := ledger{created: 1, dirsCreated: 1, freed: 3, freedWithData: 2}
	if got != want {
		t.Errorf("ledger = %+v, want %+v", got, want)
	}
}

func TestStatusFields(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	body := "Name:\tcrew\nThreads:\t7\nRssAnon:\t    1536 kB\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := statusFields(p, "RssAnon", "Threads", "voluntary_ctxt_switches")
	if err != nil {
		t.Fatal(err)
	}
	if f["RssAnon"] != 1536 || f["Threads"] != 7 || f["voluntary_ctxt_switches"] != 12 {
		t.Errorf("fields = %v", f)
	}
	if _, err := statusFields(p, "VmSwap"); err == nil {
		t.Error("a missing field must be an error, not a zero")
	}
}

func TestFirstStart(t *testing.T) {
	p := filepath.Join(t.TempDir(), "obs")
	if _, ok := firstStart(p); ok {
		t.Fatal("no file, no start")
	}
	if err := os.WriteFile(p, []byte("S 123 9\nE 456 9\nS 789 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok := firstStart(p); !ok || got != 123 {
		t.Errorf("firstStart = %d, %v; want 123", got, ok)
	}
}
