package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/rootfs"
)

// Quarantine: what crew cannot use, or what stands where crew writes,
// moved aside into quarantine/ with a note that says why, never deleted.

// QuarantineActive moves a file of the active set into quarantine/ next
// to a note that says why, and returns its new path. The caller holds the
// run's fence (or the file names no run).
func (s *rootDir) QuarantineActive(name, why string, now time.Time, host string) (string, error) {
	return s.quarantineAt(activeDir, name, why, "crew recover", now, host)
}

// quarantine moves name (of any type: a link is moved, never followed)
// from the layout directory rel ("." for the root) into quarantine/, next
// to a note that says why, and returns its new path.
func (s *rootDir) quarantine(rel, name, why, by string) (string, error) {
	host, _ := os.Hostname()
	return s.quarantineAt(rel, name, why, by, time.Now(), host)
}

func (s *rootDir) quarantineAt(rel, name, why, by string, now time.Time, host string) (string, error) {
	root, err := s.openRoot()
	if err != nil {
		return "", err
	}
	if err := s.mkdir(root, quarantineDir); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("quarantine %s: %w", name, unwrapPath(err))
	}
	qdir, err := s.layout(quarantineDir)
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, err)
	}
	from, done, err := s.dirOrRoot(rel)
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, err)
	}
	defer done()
	dest := name
	if _, err := qdir.Lstat(dest); err == nil {
		dest = fmt.Sprintf("%s.%d", dest, now.UnixNano())
	}
	note := fmt.Sprintf("quarantined at %s by %s (pid %d on %s)\noriginal path: %s\nreason: %s\n",
		now.Format(time.RFC3339), by, os.Getpid(), host, s.display(rel, name), why)
	if err := writeFileMode(qdir, dest+".why", []byte(note), durable, s.filePerm()); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", name, unwrapPath(err))
	}
	if err := renameBetween(from, name, qdir, dest); err != nil {
		_ = removeFile(qdir, dest+".why")
		return "", fmt.Errorf("quarantine %s: %w", s.display(rel, name), err)
	}
	if err := syncDir(qdir); err != nil {
		return "", err
	}
	return s.display(quarantineDir, dest), syncDir(from)
}

// openInPlace opens a file crew writes in place (the refusal log, the
// admission holder note). If something other than a regular file with one
// link is at the name, it is moved aside into quarantine/ with a note and
// a fresh file is made: a planted link or FIFO is never written through,
// and never keeps crew from working.
func (s *rootDir) openInPlace(rel string, dir *os.Root, name string, flag int, by string) (*os.File, error) {
	f, err := rootfs.Open(dir, name, flag, s.filePerm())
	var notRegular *rootfs.NotRegularError
	var linked *rootfs.LinkedError
	if !errors.As(err, &notRegular) && !errors.As(err, &linked) {
		return f, err
	}
	why := fmt.Sprintf("%v; crew writes this file in place, so it moved it aside and made a fresh one", err)
	if _, qerr := s.quarantine(rel, name, why, by); qerr != nil {
		return nil, errors.Join(err, qerr)
	}
	return rootfs.Open(dir, name, flag|os.O_EXCL, s.filePerm())
}
