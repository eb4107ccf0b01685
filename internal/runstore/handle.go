package runstore

import (
	"os"
	"strings"

	"github.com/google/renameio/v2"

	"github.com/crew-dev/crew/internal/lockfs"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/stateroot"
)

// dirHandle is a directory of the layout (rel) as the store hands it to
// the package that keeps the files in it (stateroot.Dir): logs/ to runlog,
// queue/ to queue, runs/ and runs/done/ to finishindex. Every access goes
// through the store's own: its one *os.Root, its checks of who may write a
// directory, its modes, its durable writes and its quarantine.
type dirHandle struct {
	s   *Store
	rel string
}

var _ stateroot.Dir = dirHandle{}

func (h dirHandle) Open(sub ...string) (*os.Root, error) {
	if len(sub) == 0 {
		return h.s.dir(h.rel)
	}
	return h.s.dir(h.rel + "/" + strings.Join(sub, "/"))
}

func (h dirHandle) OpenIn(parent *os.Root, name string) (*os.Root, error) {
	return h.s.openDir(parent, name, h.s.display(h.rel, name))
}

func (h dirHandle) Mkdir(parent *os.Root, name string) error { return h.s.mkdir(parent, name) }

func (h dirHandle) Path(names ...string) string {
	return h.s.display(append([]string{h.rel}, names...)...)
}

func (h dirHandle) FilePerm() os.FileMode { return h.s.filePerm() }

func (h dirHandle) WriteFile(dir *os.Root, name string, data []byte) error {
	return writeFileMode(dir, name, data, atomic, h.s.filePerm())
}

func (h dirHandle) ReplaceFile(dir *os.Root, name string, data []byte) error {
	return h.s.replaceFile(h.rel, dir, name, data, atomic)
}

func (h dirHandle) PendingFile(dir *os.Root, name string) (*renameio.PendingFile, error) {
	return h.s.pendingFile(dir, name)
}

func (h dirHandle) Quarantine(name, why, by string) (string, error) {
	return h.s.quarantine(h.rel, name, why, by)
}

func (h dirHandle) PublishLock(dir *os.Root, name string) (*lockfs.Lock, error) {
	return h.s.publishLock(dir, name)
}

func (h dirHandle) Probe(dir *os.Root, name string) (record.Liveness, error) { return probe(dir, name) }

func (h dirHandle) Remove(dir *os.Root, name string) error { return removeFile(dir, name) }

func (h dirHandle) List(dir *os.Root) ([]string, error) { return listNames(dir) }

func (h dirHandle) ListSome(dir *os.Root, n int) ([]string, bool, error) {
	return listSomeNames(dir, n)
}

func (h dirHandle) TempName(name string) string { return tempName(name) }
