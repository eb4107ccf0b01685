package runstore

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
)

// ourGroup is a group this process may give its files: its own.
func ourGroup(t *testing.T) (string, int) {
	t.Helper()
	gid := os.Getegid()
	g, err := user.LookupGroupId(strconv.Itoa(gid))
	if err != nil {
		t.Skipf("gid %d has no name here: %v", gid, err)
	}
	return g.Name, gid
}

// assertUnsafe checks that every kind of access to the state root is
// refused with an *UnsafeRootError naming path and saying want.
func assertUnsafe(t *testing.T, root, path string, want ...string) {
	t.Helper()
	s := New(root)
	defer s.Close()
	_, err := s.ListActive()
	var unsafe *UnsafeRootError
	if !errors.As(err, &unsafe) {
		t.Fatalf("ListActive = %v, want an UnsafeRootError", err)
	}
	msg := err.Error()
	for _, w := range append([]string{"refusing the state root " + root + ": " + path + " "}, want...) {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not contain %q", msg, w)
		}
	}
	if _, err := s.LockAdmission(context.Background(), time.Second); !errors.As(err, &unsafe) {
		t.Errorf("LockAdmission = %v, want an UnsafeRootError", err)
	}
	if _, _, err := s.LoadConfig(); !errors.As(err, &unsafe) {
		t.Errorf("LoadConfig = %v, want an UnsafeRootError (not wrapped as a config error)", err)
	}
	if err := s.FinishIndex().WalkFinished(func(record.RunID) bool { return true }); !errors.As(err, &unsafe) && path == root {
		t.Errorf("WalkFinished = %v, want an UnsafeRootError", err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// A state root that someone else can write is refused, whole: the root
// itself, or any directory of its layout.
func TestUnsafeStateRootsAreRefused(t *testing.T) {
	group, gid := ourGroup(t)
	t.Run("root writable by everyone", func(t *testing.T) {
		s := newStore(t)
		chmod(t, s.Root(), 0o777)
		assertUnsafe(t, s.Root(), s.Root(), "is writable by every user (mode drwxrwxrwx", "Fix: chmod go-w "+s.Root())
	})
	t.Run("root writable by its group", func(t *testing.T) {
		s := newStore(t)
		chmod(t, s.Root(), 0o770)
		assertUnsafe(t, s.Root(), s.Root(), "is writable by its group (mode drwxrwx---", "group "+group,
			"Fix: chmod go-w "+s.Root()+", or share the state root with that group on purpose: crew init --group "+group)
	})
	for _, rel := range []string{locksDir, activeDir, doneDir, ownersDir, logsDir, queueDir} {
		t.Run(rel+" writable by everyone", func(t *testing.T) {
			s := newStore(t)
			chmod(t, s.osPath(rel), 0o707)
			s2 := New(s.Root())
			defer s2.Close()
			var unsafe *UnsafeRootError
			err := s2.Ensure()
			if !errors.As(err, &unsafe) || !strings.Contains(err.Error(), s.osPath(rel)+" is writable by every user") {
				t.Errorf("Ensure = %v, want an UnsafeRootError naming %s", err, rel)
			}
			if _, err := s2.dir(rel); !errors.As(err, &unsafe) {
				t.Errorf("opening %s = %v, want an UnsafeRootError", rel, err)
			}
		})
	}
	t.Run("a shard writable by everyone", func(t *testing.T) {
		s := newStore(t)
		id := idAt(time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC), 1)
		mustWriteDone(t, s, testRecord(id, record.Succeeded))
		chmod(t, s.osPath(shardDir(id)), 0o777)
		s2 := New(s.Root())
		defer s2.Close()
		var unsafe *UnsafeRootError
		if _, err := s2.ReadDone(id); !errors.As(err, &unsafe) {
			t.Errorf("ReadDone from an unsafe shard = %v", err)
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("only root can give a directory to another user")
		}
		s := newStore(t)
		if err := os.Chown(s.Root(), 65534, -1); err != nil {
			t.Fatal(err)
		}
		assertUnsafe(t, s.Root(), s.Root(), "is not owned by "+userName(0)+", who runs crew", "owner "+userName(65534),
			"Fix: use a state root of your own (--root DIR or CREW_ROOT), or, if this one is yours, chown -R root "+s.Root())
	})
	t.Run("shared with another group than the directory's", func(t *testing.T) {
		s := newStore(t)
		writeString(t, s.ConfigPath(), `{"version": 1, "maximumInProgress": 1, "group": "`+group+`"}`)
		other := gid + 1
		if os.Geteuid() != 0 {
			t.Skip("only root can give a directory a group it is not in")
		}
		if err := os.Chown(s.osPath(logsDir), -1, other); err != nil {
			t.Fatal(err)
		}
		chmod(t, s.osPath(logsDir), 0o2770)
		s2 := New(s.Root())
		defer s2.Close()
		_, err := s2.dir(logsDir)
		if err == nil || !strings.Contains(err.Error(), `is writable by its group, but crew.json shares the state root with group "`+group+`"`) ||
			!strings.Contains(err.Error(), "Fix: chgrp "+group+" "+s.osPath(logsDir)) {
			t.Errorf("dir(logs) = %v", err)
		}
	})
	t.Run("group-writable root without set-group-ID", func(t *testing.T) {
		s := newStore(t)
		writeString(t, s.ConfigPath(), `{"version": 1, "maximumInProgress": 1, "group": "`+group+`"}`)
		if err := os.Chown(s.Root(), -1, gid); err != nil {
			t.Fatal(err)
		}
		chmod(t, s.Root(), 0o770)
		assertUnsafe(t, s.Root(), s.Root(), "is writable by its group but not set-group-ID, so it was not shared on purpose",
			"Fix: crew init --group "+group)
	})
	t.Run("group that does not exist", func(t *testing.T) {
		s := newStore(t)
		writeString(t, s.ConfigPath(), `{"version": 1, "maximumInProgress": 1, "group": "no-such-group-crew"}`)
		chmod(t, s.Root(), 0o2770)
		assertUnsafe(t, s.Root(), s.Root(), `group "no-such-group-crew" does not exist on this machine`)
	})
	// Private and safe: fine, however the files inside look.
	s := newStore(t)
	writeString(t, s.osPath("stray"), "x")
	chmod(t, s.osPath("stray"), 0o666)
	if _, err := New(s.Root()).ListActive(); err != nil {
		t.Errorf("a private root with a stray file: %v", err)
	}
}

func assertPerm(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	got := fi.Mode().Perm() | fi.Mode()&os.ModeSetgid
	if got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

// A root shared on purpose is accepted; everything crew makes in it has
// the shared modes, whatever the umask; MakePrivate undoes it.
func TestSharedStateRoot(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	group, gid := ourGroup(t)
	s := newStore(t)
	id := idAt(time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC), 1)
	mustWriteDone(t, s, testRecord(id, record.Succeeded))
	chmod(t, s.Root(), 0o770) // made group-writable by hand: refused until shared
	if _, err := New(s.Root()).ListActive(); err == nil {
		t.Fatal("a group-writable root was accepted before it was shared")
	}

	sh := New(s.Root())
	defer sh.Close()
	sh.PrepareSharing(group, gid)
	a := lockAdmission(t, sh)
	cfg := record.DefaultConfig()
	cfg.Group = group
	if err := a.SaveConfig(cfg); err != nil {
		t.Fatal(err)
	}
	rep, err := a.ShareWith(group, gid)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	if rep.Changed == 0 {
		t.Error("ShareWith changed nothing")
	}
	for _, dir := range []string{"", locksDir, activeDir, doneDir, shardDir(id), ownersDir, logsDir, queueDir} {
		assertPerm(t, s.osPath(dir), SharedDirPerm)
	}
	for _, f := range []string{configName, s.DonePath(id)} {
		if !filepath.IsAbs(f) {
			f = s.osPath(f)
		}
		assertPerm(t, f, SharedFilePerm)
	}

	// A fresh process accepts it and creates everything shared.
	s2 := New(s.Root())
	defer s2.Close()
	a = lockAdmission(t, s2)
	next := idAt(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), 2)
	locks, err := a.Reserve(testRecord(next, record.Provisioning))
	if err != nil {
		t.Fatal(err)
	}
	w, err := a.Enqueue(testTicket(idAt(time.Now(), 3), "t"))
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	f, _, err := s2.Logs().CreateLog(next)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	rec := testRecord(next, record.Succeeded)
	if err := locks.Finish(rec); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.holderPath(), s.Logs().LogPath(next), s.DonePath(next),
		s.osPath(queueDir, queue.TicketName(w.ID())), s.osPath(queueDir, queue.LockName(w.ID())), s.osPath(queueDir, queue.BellName(w.ID()))} {
		assertPerm(t, p, SharedFilePerm)
	}
	assertPerm(t, s.osPath(shardDir(next)), SharedDirPerm)
	w.Remove()

	// Private again.
	s3 := New(s.Root())
	defer s3.Close()
	a = lockAdmission(t, s3)
	if _, err := a.MakePrivate(); err != nil {
		t.Fatal(err)
	}
	a.Release()
	for _, dir := range []string{"", locksDir, doneDir, shardDir(next)} {
		assertPerm(t, s.osPath(dir), DirPerm)
	}
	assertPerm(t, s.DonePath(next), FilePerm)
}

// A file with a second hard link is never converted (its mode is the
// file elsewhere's), and a link is never followed.
func TestShareLeavesLinksAlone(t *testing.T) {
	group, gid := ourGroup(t)
	s := newStore(t)
	outside := filepath.Join(t.TempDir(), "outside")
	writeString(t, outside, "x")
	if err := os.Link(outside, s.osPath(logsDir, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, s.osPath(logsDir, "soft")); err != nil {
		t.Fatal(err)
	}
	s.PrepareSharing(group, gid)
	a := lockAdmission(t, s)
	rep, err := a.ShareWith(group, gid)
	a.Release()
	if err != nil {
		t.Fatal(err)
	}
	assertPerm(t, outside, 0o600)
	if len(rep.Skipped) != 2 || !strings.Contains(strings.Join(rep.Skipped, ";"), "hard (2 hard links)") ||
		!strings.Contains(strings.Join(rep.Skipped, ";"), "soft (a symbolic link)") {
		t.Errorf("Skipped = %q", rep.Skipped)
	}
}
