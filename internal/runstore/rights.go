package runstore

// Whose a run or a waiting start is, as the kernel says. In a state root
// shared with a group every member can write every file, so no file's
// content can say who may stop a run; the owner of a file, as the kernel
// reports it, is a fact no member can forge for another (only root can
// give a file away).

import (
	"fmt"
	"os"
	"syscall"

	"github.com/crew-dev/crew/internal/queue"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/rootfs"
)

// RunUser is the user run id belongs to: the owner of its owner lock file.
// The process that reserved the run created that file exclusively and its
// supervisor (that process, or its detached child) holds it until the run
// is final, so its owner is the user the supervisor runs as: whose rights
// a stop of the run would use. want, the lock ids the run's record names,
// proves the file is still the run's own.
func (s procs) RunUser(id record.RunID, want *record.LockIDs) (int, error) {
	dir, err := s.layout(ownersDir)
	if err != nil {
		return -1, fmt.Errorf("tell whose run %s is: %w", id, err)
	}
	var wantOwner *record.FileID
	if want != nil {
		wantOwner = &want.Owner
	}
	uid, err := fileOwner(dir, ownerLockName(id), wantOwner)
	if err != nil {
		return -1, fmt.Errorf("tell whose run %s is: %w", id, err)
	}
	return uid, nil
}

// WaiterUser is the user the waiting start of ticket id belongs to: the
// owner of the lock its waiting process created for it and holds.
func (s procs) WaiterUser(id record.RunID) (int, error) {
	dir, err := s.layout(queueDir)
	if err != nil {
		return -1, fmt.Errorf("tell whose waiting start %s is: %w", id, err)
	}
	uid, err := fileOwner(dir, queue.LockName(id), nil)
	if err != nil {
		return -1, fmt.Errorf("tell whose waiting start %s is: %w", id, err)
	}
	return uid, nil
}

// fileOwner is the owner of the regular file name in dir (never through a
// link, one link only), which must be the file want if want is set.
func fileOwner(dir *os.Root, name string, want *record.FileID) (int, error) {
	fi, err := dir.Lstat(name)
	if err != nil {
		return -1, unwrapPath(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return -1, &rootfs.NotRegularError{Name: name, Mode: fi.Mode()}
	case !ok:
		return -1, fmt.Errorf("%s: the file system names no owner for it", name)
	case st.Nlink != 1:
		return -1, &rootfs.LinkedError{Name: name, Links: uint64(st.Nlink)}
	case want != nil && fileID(fi) != *want:
		return -1, fmt.Errorf("%s is not the lock file the run's record names (replaced since)", name)
	}
	return int(st.Uid), nil
}

// UserName names a user for messages: "alice (uid 1000)", or "uid 1000"
// where the user database does not know it.
func UserName(uid int) string { return userName(uid) }
