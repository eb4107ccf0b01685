package runstore

// Sharing a state root with a group (crew init --group) and making it
// private again (crew init --no-group): the modes and group of everything
// in it, changed through descriptors, never through a link.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/crew-dev/crew/internal/rootfs"
)

// ShareReport says what a conversion did.
type ShareReport struct {
	Changed int      // directories and files whose group or mode changed
	Skipped []string // entries left alone (links, devices, files with other links, others' files), with why
}

// entry is one thing found in the state root by walk.
type entry struct {
	display string
	mode    fs.FileMode
	uid     int
	gid     int
	links   uint64
}

// shareable reports whether e is already as ShareWith makes things, so
// that an entry of another member of the group needs no change.
func (e entry) shared(gid int) bool {
	want := SharedFilePerm
	if e.mode.IsDir() {
		want = SharedDirPerm
	}
	return e.gid == gid && e.mode.Perm() == want.Perm() && e.mode&os.ModeSetgid == want&os.ModeSetgid
}

// walk calls fn for everything below dir (depth first, a directory after
// its contents), never following a symbolic link. fn gets the directory
// the entry is in and its name.
func walk(dir *os.Root, display string, fn func(dir *os.Root, name string, e entry) error) error {
	names, err := listNames(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", display, unwrapPath(err))
	}
	slices.Sort(names)
	for _, name := range names {
		fi, err := dir.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile (a run finishing)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", display, unwrapPath(err))
		}
		e := entry{display: display + "/" + name, mode: fi.Mode(), uid: -1, gid: -1, links: 1}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.uid, e.gid, e.links = int(st.Uid), int(st.Gid), uint64(st.Nlink)
		}
		if fi.IsDir() {
			sub, err := dir.OpenRoot(name)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("open %s: %w", e.display, unwrapPath(err))
			}
			if opened, err := sub.Stat("."); err != nil || !os.SameFile(fi, opened) {
				sub.Close()
				return fmt.Errorf("%s was replaced while being walked", e.display)
			}
			err = walk(sub, e.display, fn)
			sub.Close()
			if err != nil {
				return err
			}
		}
		if err := fn(dir, name, e); err != nil {
			return err
		}
	}
	return nil
}

// ShareWith makes the state root shared with group gid: every directory
// gets that group and mode 2770, every regular file and FIFO that group
// and mode 0660, the root itself last (so that a root that looks shared
// is shared all through). The caller has written crew.json's group first.
// Everything must belong to crew's user (unless crew runs as root):
// otherwise nothing is changed and the error names what is not.
func (a *Admission) ShareWith(group string, gid int) (*ShareReport, error) {
	s := a.s
	root, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	if err := a.CheckShareable(gid); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.sharing = sharing{name: group, gid: gid}
	s.mu.Unlock()
	rep := &ShareReport{}
	err = walk(root, s.path, func(dir *os.Root, name string, e entry) error {
		return convert(dir, name, e, gid, SharedDirPerm, SharedFilePerm, rep)
	})
	if err != nil {
		return rep, err
	}
	if err := s.convertRoot(root, gid, SharedDirPerm, rep); err != nil {
		return rep, err
	}
	s.mu.Lock()
	s.sharingNow = false
	s.mu.Unlock()
	return rep, nil
}

// CheckShareable fails, naming them, if entries of the state root that
// ShareWith would change belong to other users than crew's (unless crew
// runs as root): only a file's owner can give it a group. Entries of other
// members that are shared already are fine.
func (a *Admission) CheckShareable(gid int) error {
	s := a.s
	root, err := s.openRoot()
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	var foreign []string
	err = walk(root, s.path, func(_ *os.Root, _ string, e entry) error {
		if euid != 0 && e.uid != euid && convertible(e.mode) && !e.shared(gid) {
			foreign = append(foreign, fmt.Sprintf("%s (owner %s)", e.display, userName(e.uid)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(foreign) > 0 {
		return fmt.Errorf("cannot share the state root %s: %d entries belong to other users, and only their owner (or root) can change their group: %s",
			s.path, len(foreign), strings.Join(firstN(foreign, 3), ", "))
	}
	return nil
}

// MakePrivate makes a shared state root private again: directories 0700,
// crew's own files 0600, the root itself last; the caller has removed
// crew.json's group first. Every directory must belong to crew's user,
// since a directory owned by another member of the group would be refused
// afterwards: otherwise nothing is changed and the error names it. Files
// of other members are left as they are: only crew's user can reach them
// any more. Run as root, MakePrivate gives everything to the owner of the
// root directory, whose private state root it becomes.
func (a *Admission) MakePrivate() (*ShareReport, error) {
	s := a.s
	root, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	owner := -1
	if os.Geteuid() == 0 {
		fi, err := root.Stat(".")
		if err != nil {
			return nil, err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = int(st.Uid)
		}
	}
	if err := a.CheckPrivate(); err != nil {
		return nil, err
	}
	rep := &ShareReport{}
	s.mu.Lock()
	s.sharing = sharing{gid: -1}
	s.mu.Unlock()
	err = walk(root, s.path, func(dir *os.Root, name string, e entry) error {
		return convert(dir, name, e, owner, DirPerm, FilePerm, rep)
	})
	if err != nil {
		return rep, err
	}
	if err := s.convertRoot(root, owner, DirPerm, rep); err != nil {
		return rep, err
	}
	s.mu.Lock()
	s.sharing = sharing{gid: -1}
	s.mu.Unlock()
	return rep, nil
}

// CheckPrivate fails, naming them, if directories of the state root
// belong to other users than crew's (as root, nothing fails: MakePrivate
// gives everything to the root directory's owner).
func (a *Admission) CheckPrivate() error {
	s := a.s
	root, err := s.openRoot()
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	var foreign []string
	err = walk(root, s.path, func(_ *os.Root, _ string, e entry) error {
		if euid != 0 && e.uid != euid && e.mode.IsDir() {
			foreign = append(foreign, fmt.Sprintf("%s (owner %s)", e.display, userName(e.uid)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(foreign) > 0 {
		return fmt.Errorf("cannot make the state root %s private: %d directories belong to other users: %s; run crew init --no-group as root (it gives everything to the root directory's owner), or move the state root aside",
			s.path, len(foreign), strings.Join(firstN(foreign, 3), ", "))
	}
	return nil
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// convert gives one entry its group (a gid when sharing) or its owner (a
// uid when making private as root), and its mode,
// through a descriptor of the entry itself. Links and anything that is
// not a directory, regular file or FIFO are left alone, and so is a file
// with a second hard link (changing it would change a file elsewhere).
func convert(dir *os.Root, name string, e entry, id int, dirPerm, filePerm os.FileMode, rep *ShareReport) error {
	var f *os.File
	var err error
	perm := filePerm
	switch {
	case e.mode.IsDir():
		perm = dirPerm
		f, err = dir.Open(name)
		if err == nil {
			if fi, serr := f.Stat(); serr != nil || !fi.IsDir() {
				f.Close()
				f, err = nil, fmt.Errorf("%s was replaced while being changed", e.display)
			}
		}
	case e.mode.IsRegular():
		f, err = rootfs.Open(dir, name, os.O_RDONLY, 0)
	case e.mode.Type() == fs.ModeNamedPipe:
		f, err = rootfs.OpenFIFO(dir, name, os.O_RDONLY)
	default:
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (%s)", e.display, rootfs.Kind(e.mode)))
		return nil
	}
	var linked *rootfs.LinkedError
	switch {
	case errors.As(err, &linked):
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (%d hard links)", e.display, linked.Links))
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return nil // gone meanwhile
	case err != nil:
		return fmt.Errorf("%s: %w", e.display, unwrapPath(err))
	}
	defer f.Close()
	if euid := os.Geteuid(); euid != 0 && e.uid != euid {
		// Another member's: as it should be already, or not ours to change.
		if !(perm&0o070 != 0 && e.shared(id)) {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (owner %s)", e.display, userName(e.uid)))
		}
		return nil
	}
	return changeFile(f, e.display, id, perm, rep)
}

func (s *rootDir) convertRoot(root *os.Root, id int, perm os.FileMode, rep *ShareReport) error {
	f, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, unwrapPath(err))
	}
	defer f.Close()
	return changeFile(f, s.path, id, perm, rep)
}

// changeFile sets an open file's mode and, unless id is -1, its group
// (perm is a shared mode) or its owner (perm is a private mode).
func changeFile(f *os.File, display string, id int, perm os.FileMode, rep *ShareReport) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", display, err)
	}
	changed := false
	shared := perm&0o070 != 0
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && id >= 0 {
		switch {
		case shared && int(st.Gid) != id:
			if err := f.Chown(-1, id); err != nil {
				return fmt.Errorf("chgrp %s: %w", display, unwrapPath(err))
			}
			changed = true
		case !shared && int(st.Uid) != id:
			if err := f.Chown(id, -1); err != nil {
				return fmt.Errorf("chown %s: %w", display, unwrapPath(err))
			}
			changed = true
		}
	}
	want := perm.Perm() | perm&os.ModeSetgid
	if fi.Mode().Perm()|fi.Mode()&os.ModeSetgid != want {
		if err := f.Chmod(want); err != nil {
			return fmt.Errorf("chmod %s: %w", display, unwrapPath(err))
		}
		changed = true
	}
	if changed {
		rep.Changed++
	}
	return nil
}

// SharedGroup is the group crew.json shares the state root with, as far
// as it can be read at all ("" if none): for keeping it when a broken
// crew.json is rewritten.
func (s *rootDir) SharedGroup() string {
	if _, err := s.openRoot(); err != nil {
		return ""
	}
	s.refreshSharing()
	return s.share().name
}

// convertible: the kinds of entry a conversion changes.
func convertible(m fs.FileMode) bool {
	return m.IsDir() || m.IsRegular() || m.Type() == fs.ModeNamedPipe
}
