package runstore

// Who may write the state root. crew acts on what it finds there (it
// quarantines, removes, signals, writes logs), so whoever can write it can
// steer crew. crew therefore uses a state root only if every directory of
// it can be written by crew's own user alone, or, when the root was shared
// with a group on purpose (`crew init --group NAME`), by that group too:
//
//   - private (the default): each directory is owned by crew's effective
//     user and writable by nobody else (0700 when crew makes it);
//   - shared: crew.json names the group; each directory is owned by crew's
//     user or by that group, and writable by nobody outside it; the root
//     itself is set-group-ID (2770), a bit only its owner can set, so an
//     accidental `chmod g+w` is never mistaken for sharing. Directories
//     are 2770 and files 0660, whatever the umask.
//
// Files are not checked one by one: nobody else can create, replace or
// link a name in a directory only trusted users can write, and rootfs
// refuses links and anything but regular files wherever they come from.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/crew-dev/crew/internal/rootfs"
)

// Modes of what crew creates in a shared state root.
const (
	SharedDirPerm  os.FileMode = 0o770 | os.ModeSetgid
	SharedFilePerm os.FileMode = 0o660
)

// sharing is the group a state root is shared with, as crew.json says.
type sharing struct {
	name string // as crew.json names it; empty: private
	gid  int    // -1 if name does not resolve on this machine
	err  error  // why crew.json could not tell (for messages only)
}

func (sh sharing) shared() bool { return sh.name != "" && sh.gid >= 0 }

// UnsafeRootError is a state root (or a directory of it) that someone
// other than crew's user, or the group it was shared with, can write.
// Nothing was read from it beyond its mode and crew.json's group.
type UnsafeRootError struct {
	Root  string // the state root
	Path  string // the directory at fault
	Why   string // what is wrong, in words
	Owner string // "alice (uid 1000)"
	Group string // "staff (gid 20)"
	Mode  fs.FileMode
	Fix   string
}

func (e *UnsafeRootError) Error() string {
	return fmt.Sprintf("refusing the state root %s: %s %s (mode %s, owner %s, group %s); "+
		"whoever can write a state root can make crew act on files planted there, so crew uses only one that nobody "+
		"but its user (and the group it was shared with by `crew init --group`) can write. Fix: %s",
		e.Root, e.Path, e.Why, e.Mode, e.Owner, e.Group, e.Fix)
}

// readSharing reads which group crew.json shares the root with. It is
// lenient on purpose: a crew.json that admission would refuse (a wrong
// cap, an unknown field) still says who may write the root.
func readSharing(root *os.Root) sharing {
	data, err := rootfs.ReadFile(root, configName, MaxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return sharing{gid: -1}
	}
	if err != nil {
		return sharing{gid: -1, err: unwrapPath(err)}
	}
	var peek struct {
		Group string `json:"group"`
	}
	if err := json.Unmarshal(data, &peek); err != nil {
		return sharing{gid: -1, err: fmt.Errorf("%s is not valid JSON", configName)}
	}
	sh := sharing{name: peek.Group, gid: -1}
	if sh.name != "" {
		sh.gid, sh.err = LookupGroup(sh.name)
	}
	return sh
}

// LookupGroup resolves a group name (or number) to its gid.
func LookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			g, err = user.LookupGroupId(name)
		}
	}
	if err != nil {
		return -1, fmt.Errorf("group %q does not exist on this machine", name)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("group %q has gid %q", name, g.Gid)
	}
	return gid, nil
}

// share is the state root's sharing as this process last read it.
func (s *rootDir) share() sharing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sharing
}

// refreshSharing reads crew.json's group again: `crew init --group` may
// have shared (or unshared) the root since this process opened it.
func (s *rootDir) refreshSharing() {
	s.mu.Lock()
	root := s.root
	s.mu.Unlock()
	if root == nil {
		return
	}
	sh := readSharing(root)
	s.mu.Lock()
	if !s.sharingNow {
		s.sharing = sh
	}
	s.mu.Unlock()
}

// dirPerm and filePerm are the modes crew creates directories and files
// with in this state root.
func (s *rootDir) dirPerm() os.FileMode {
	if s.share().shared() {
		return SharedDirPerm
	}
	return DirPerm
}

func (s *rootDir) filePerm() os.FileMode {
	if s.share().shared() {
		return SharedFilePerm
	}
	return FilePerm
}

// checkDir refuses a directory of the state root that someone untrusted
// can write. fi is the directory's own stat (from its descriptor, or an
// Lstat that found a directory). If the directory fails only because of
// its group, crew.json is read again once: the root may have been shared
// a moment ago.
func (s *rootDir) checkDir(fi os.FileInfo, display string, isRoot bool) error {
	err := s.checkDirAs(fi, display, isRoot, s.share())
	if err == nil {
		return nil
	}
	s.refreshSharing()
	return s.checkDirAs(fi, display, isRoot, s.share())
}

func (s *rootDir) checkDirAs(fi os.FileInfo, display string, isRoot bool, sh sharing) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // not a Unix file system's stat: nothing to tell from
	}
	uid, gid, mode := int(st.Uid), int(st.Gid), fi.Mode()
	euid := s.euid()
	inGroup := sh.shared() && gid == sh.gid
	s.mu.Lock()
	converting := s.sharingNow
	s.mu.Unlock()
	// The names in the error cost a read of /etc/passwd and /etc/group:
	// only for a directory that fails the check.
	e := &UnsafeRootError{Root: s.path, Path: display, Mode: mode}
	chmod := "chmod go-w " + display
	if sh.shared() {
		chmod = "chmod o-w " + display
	}
	switch {
	case mode.Perm()&0o002 != 0:
		e.Why = "is writable by every user"
		e.Fix = chmod
	case converting && uid == euid:
		// Its owner shares the root on purpose: whatever group the
		// directory has now, ShareWith gives it the new one.
		return nil
	case mode.Perm()&0o020 != 0 && !inGroup && sh.name != "":
		e.Why = fmt.Sprintf("is writable by its group, but crew.json shares the state root with group %q", sh.name)
		if sh.err != nil {
			e.Why += fmt.Sprintf(" (%v)", sh.err)
		}
		e.Fix = fmt.Sprintf("chgrp %s %s, or chmod g-w %s", sh.name, display, display)
	case mode.Perm()&0o020 != 0 && !inGroup:
		e.Why = "is writable by its group"
		if sh.err != nil {
			e.Why += fmt.Sprintf(", and crew.json does not say the state root is shared with it (%v)", sh.err)
		}
		e.Fix = fmt.Sprintf("%s, or share the state root with that group on purpose: crew init --group %s", chmod, groupNameOnly(gid))
	case uid != euid && !inGroup:
		e.Why = fmt.Sprintf("is not owned by %s, who runs crew", userName(euid))
		e.Fix = fmt.Sprintf("use a state root of your own (--root DIR or CREW_ROOT), or, if this one is yours, chown -R %s %s", userNameOnly(euid), s.path)
	case isRoot && mode.Perm()&0o020 != 0 && mode&os.ModeSetgid == 0:
		e.Why = "is writable by its group but not set-group-ID, so it was not shared on purpose"
		e.Fix = fmt.Sprintf("crew init --group %s (which makes it 2770), or chmod g-w %s", sh.name, display)
	default:
		return nil
	}
	e.Owner, e.Group = userName(uid), groupName(gid)
	return e
}

func userNameOnly(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

func groupNameOnly(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return fmt.Sprintf("%s (gid %d)", g.Name, gid)
	}
	return fmt.Sprintf("gid %d", gid)
}

// PrepareSharing tells this store that its user is sharing the state root
// with group (crew init --group): directories crew's user owns pass the
// checks whatever their group and group write bit (so that a root someone
// made group-writable can be shared on purpose, which is the fix crew
// suggests), until ShareWith has converted them. Others' directories, and
// anything writable by every user, are still refused.
func (s *rootDir) PrepareSharing(group string, gid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sharingNow = true
	s.sharing = sharing{name: group, gid: gid}
	if s.root != nil {
		s.root.Close()
		s.root = nil
	}
}

// mkdir makes the directory name in parent with the state root's
// directory mode, exactly (os.Root.Mkdir takes no set-group-ID bit, and
// the umask would take the group's bits of a shared root). An existing
// directory is left as it is: fs.ErrExist.
func (s *rootDir) mkdir(parent *os.Root, name string) error {
	perm := s.dirPerm()
	if err := parent.Mkdir(name, perm.Perm()); err != nil {
		return err
	}
	if perm == DirPerm {
		return nil // 0700: the umask cannot have taken anything that matters
	}
	d, err := parent.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return err
	}
	if lfi, err := parent.Lstat(name); err != nil || !os.SameFile(fi, lfi) || !fi.IsDir() {
		return fmt.Errorf("%s was replaced while being made", name)
	}
	if fi.Mode().Perm() == perm.Perm() && fi.Mode()&os.ModeSetgid != 0 {
		return nil
	}
	return d.Chmod(perm)
}
