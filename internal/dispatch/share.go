package dispatch

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/crew-dev/crew/internal/localstore"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// UnsafeRootError is a state root crew refuses to use: someone other
// than its user (or the group it was shared with) can write it.
type UnsafeRootError = runstore.UnsafeRootError

// Share shares the state root with group (crew init --group): crew.json
// names the group, then every directory becomes group-owned 2770 and every
// file 0660, the root last. Running it again converts whatever was made
// private meanwhile (files of runs that were already running). It happens
// under the admission lock, so no admission reads a half-changed config.
func (m Admin) Share(group string, lockTimeout time.Duration) (*vocab.ShareResult, error) {
	gid, err := m.PrepareShare(group)
	if err != nil {
		return nil, err
	}
	st, err := m.sharedRoot()
	if err != nil {
		return nil, err
	}
	adm, err := st.LockAdmission(context.Background(), lockTimeout)
	if err != nil {
		return nil, err
	}
	defer adm.Release()
	cfg, _, err := st.LoadConfig()
	if err != nil {
		return nil, err
	}
	if err := adm.CheckShareable(gid); err != nil {
		return nil, err
	}
	cfg.Group = group
	// The group goes into crew.json first: from then on every crew accepts
	// directories of the group, whichever are converted yet.
	if err := adm.SaveConfig(cfg); err != nil {
		return nil, err
	}
	rep, err := adm.ShareWith(group, gid)
	if err != nil {
		return nil, fmt.Errorf("share the state root with group %s: %w", group, err)
	}
	return &vocab.ShareResult{Root: st.Root(), Group: group, Changed: rep.Changed, Skipped: rep.Skipped}, nil
}

// PrepareShare checks that group can be given to the state root, and lets
// this dispatcher use a root whose directories its user owns whatever
// their group (a root made group-writable by hand is shared on purpose by
// exactly this command), until Share has converted it.
func (m Admin) PrepareShare(group string) (int, error) {
	st, err := m.sharedRoot()
	if err != nil {
		return -1, err
	}
	gid, err := runstore.LookupGroup(group)
	if err != nil {
		return -1, vocab.Usagef("--group: %v", err)
	}
	if !memberOf(gid) {
		return -1, vocab.Usagef("--group %s: you are not a member of group %s, and only its members (or root) can give it a directory", group, group)
	}
	st.PrepareSharing(group, gid)
	return gid, nil
}

// Unshare makes a shared state root private again (crew init --no-group):
// directories 0700 and crew's own files 0600, the root last; then the group
// leaves crew.json. Other users lose access to it at once.
func (m Admin) Unshare(lockTimeout time.Duration) (*vocab.ShareResult, error) {
	st, err := m.sharedRoot()
	if err != nil {
		return nil, err
	}
	adm, err := st.LockAdmission(context.Background(), lockTimeout)
	if err != nil {
		return nil, err
	}
	defer adm.Release()
	cfg, _, err := st.LoadConfig()
	if err != nil {
		return nil, err
	}
	if err := adm.CheckPrivate(); err != nil {
		return nil, err
	}
	// The group leaves crew.json first: the conversion then covers the
	// rewritten crew.json too (run as root, it must become the owner's).
	if cfg.Group != "" {
		cfg.Group = ""
		if err := adm.SaveConfig(cfg); err != nil {
			return nil, err
		}
	}
	rep, err := adm.MakePrivate()
	if err != nil {
		return nil, err
	}
	return &vocab.ShareResult{Root: st.Root(), Changed: rep.Changed, Skipped: rep.Skipped}, nil
}

// sharedRoot is the state root to share, or the refusal of a store that
// is none: an etcd store has no files to give a group; etcd's own
// authentication says who may use it.
func (m Admin) sharedRoot() (*localstore.Store, error) {
	d := m.d
	st, ok := d.stateRoot()
	if !ok {
		return nil, &vocab.RefusedOnStoreError{What: "crew init --group and --no-group", Where: d.Store.Where(),
			Why: "it has no files to share with a group: who may use it is for etcd's own authentication to say"}
	}
	return st, nil
}

// memberOf reports whether this process may give a file group gid.
func memberOf(gid int) bool {
	if os.Geteuid() == 0 || os.Getegid() == gid {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, gid)
}
