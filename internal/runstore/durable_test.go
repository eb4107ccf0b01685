package runstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/crew-dev/crew/internal/stateroot"
)

// openTestRoot opens a fresh directory as the *os.Root writeFile works in.
func openTestRoot(t testing.TB) (string, *os.Root) {
	t.Helper()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return dir, r
}

var durabilities = map[string]durability{"atomic": atomic, "durable": durable}

// writeFile is writeFileMode for a file of crew's private mode.
func writeFile(dir *os.Root, name string, data []byte, how durability) error {
	return writeFileMode(dir, name, data, how, FilePerm)
}

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	for name, how := range durabilities {
		t.Run(name, func(t *testing.T) {
			dir, r := openTestRoot(t)
			path := filepath.Join(dir, "rec.json")
			if err := writeFile(r, "rec.json", []byte("first version, rather long\n"), how); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, path); got != "first version, rather long\n" {
				t.Fatalf("content = %q", got)
			}
			assertMode(t, path, FilePerm)
			assertOnlyFiles(t, dir, "rec.json")

			// Shorter content replaces it entirely (no tail of the old one).
			if err := writeFile(r, "rec.json", []byte("v2\n"), how); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, path); got != "v2\n" {
				t.Fatalf("content after replace = %q", got)
			}
			assertOnlyFiles(t, dir, "rec.json")

			// Empty content is written as such.
			if err := writeFile(r, "rec.json", nil, how); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, path); got != "" {
				t.Fatalf("content after empty write = %q", got)
			}
			assertOnlyFiles(t, dir, "rec.json")
		})
	}
}

func TestWriteFileReplacesByRename(t *testing.T) {
	// A reader that opened the old file keeps reading the old content: the
	// new one arrives by rename, never by rewriting the old inode in place.
	for name, how := range durabilities {
		t.Run(name, func(t *testing.T) {
			dir, r := openTestRoot(t)
			path := filepath.Join(dir, "rec.json")
			if err := writeFile(r, "rec.json", []byte("old"), how); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			before, _ := f.Stat()
			if err := writeFile(r, "rec.json", []byte("new content"), how); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 64)
			n, _ := f.ReadAt(b, 0)
			if string(b[:n]) != "old" {
				t.Errorf("old descriptor reads %q after replace, want \"old\" (file rewritten in place?)", b[:n])
			}
			after, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if os.SameFile(before, after) {
				t.Error("the name still holds the old inode after writeFile")
			}
		})
	}
}

// A file or link planted at the target's name is replaced, never written
// through: the rename replaces the link itself, and what it pointed to,
// inside or outside the root, is left alone.
func TestWriteFileNeverWritesThroughALink(t *testing.T) {
	dir, r := openTestRoot(t)
	outside := filepath.Join(t.TempDir(), "victim")
	writeString(t, outside, "precious")
	if err := os.Symlink(outside, filepath.Join(dir, "rec.json")); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(r, "rec.json", []byte("new"), durable); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, outside); got != "precious" {
		t.Errorf("the link's target = %q, want it untouched", got)
	}
	fi, err := os.Lstat(filepath.Join(dir, "rec.json"))
	if err != nil || !fi.Mode().IsRegular() || readString(t, filepath.Join(dir, "rec.json")) != "new" {
		t.Errorf("rec.json after writeFile over a link: %v, %v; want a regular file", fi, err)
	}
}

func TestWriteFileConcurrentWritersNeverTear(t *testing.T) {
	dir, r := openTestRoot(t)
	path := filepath.Join(dir, "rec.json")
	contents := []string{strings.Repeat("a", 10000), strings.Repeat("b", 20), strings.Repeat("c", 5000)}
	if err := writeFile(r, "rec.json", []byte(contents[0]), durable); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	torn := make(chan string, 1)
	wg.Add(1)
	go func() { // reader
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil || !slices.Contains(contents, string(b)) {
				select {
				case torn <- string(b) + " / " + errString(err):
				default:
				}
				return
			}
		}
	}()
	var writers sync.WaitGroup
	writeErrs := make(chan error, 4*25)
	for i := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for j := range 25 {
				if err := writeFile(r, "rec.json", []byte(contents[(i+j)%len(contents)]), atomic); err != nil {
					writeErrs <- err
					return
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	close(writeErrs)
	for err := range writeErrs {
		t.Error(err)
	}
	select {
	case s := <-torn:
		if len(s) > 80 {
			s = s[:80] + "..."
		}
		t.Fatalf("a reader saw a torn or missing file: %q", s)
	default:
	}
	assertOnlyFiles(t, dir, "rec.json")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// The directory is gone (removed after it was opened): the write fails
// with ErrNotExist. Callers name the file (see TestWriteActiveMissingDir).
func TestWriteFileMissingDir(t *testing.T) {
	for name, how := range durabilities {
		dir, r := openTestRoot(t)
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		err := writeFile(r, "rec.json", []byte("x"), how)
		if err == nil {
			t.Fatalf("%s write into a removed directory succeeded", name)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s write error %q does not wrap ErrNotExist", name, err)
		}
	}
}

func TestWriteFileOntoDirectoryLeavesNoTemp(t *testing.T) {
	// The rename fails (target is a non-empty directory): the temporary
	// file is cleaned up and the target is untouched.
	dir, r := openTestRoot(t)
	path := filepath.Join(dir, "rec.json")
	mkdirAll(t, filepath.Join(path, "child"))
	if err := writeFile(r, "rec.json", []byte("x"), durable); err == nil {
		t.Fatal("writeFile onto a non-empty directory succeeded")
	}
	assertOnlyFiles(t, dir, "rec.json")
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Errorf("target changed: %v, %v", fi, err)
	}
}

func TestWriteFileReadOnlyDirKeepsOldContent(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir, r := openTestRoot(t)
	path := filepath.Join(dir, "rec.json")
	if err := writeFile(r, "rec.json", []byte("old"), durable); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if err := writeFile(r, "rec.json", []byte("new"), durable); err == nil {
		t.Fatal("writeFile into a read-only directory succeeded")
	}
	if got := readString(t, path); got != "old" {
		t.Errorf("content after failed write = %q, want old", got)
	}
	assertOnlyFiles(t, dir, "rec.json")
}

// Temporary files (renameio's for a replace, tempName's for a link) are
// dot-files beside the target (so listings skip them and recovery finds
// them), and carry the target's name (so recovery can tell whose they are).
func TestTempName(t *testing.T) {
	_, r := openTestRoot(t)
	name := string(testID) + ".json"
	pf, err := (&Store{}).pendingFile(r, name)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Cleanup()
	a := filepath.Base(pf.Name())
	b := tempName(name)
	for _, tmp := range []string{a, b} {
		if !stateroot.IsTempName(tmp) || !strings.HasPrefix(tmp, "."+name) || len(tmp) == len(name)+1 {
			t.Errorf("temporary name %q, want .<name><random> in the same directory", tmp)
		}
		if id, ok := idFromTempName(tmp); !ok || id != testID {
			t.Errorf("idFromTempName(%q) = %q, %v", tmp, id, ok)
		}
	}
	if b == tempName(name) {
		t.Errorf("two temporary names are equal: %q", b)
	}
	if _, err := r.Lstat(a); err != nil {
		t.Errorf("renameio's temporary file is not in the target's directory: %v", err)
	}
	for _, name := range []string{".crew.json0123", ".x", "." + string(testID)[:10]} {
		if id, ok := idFromTempName(name); ok {
			t.Errorf("idFromTempName(%q) = %q, want none", name, id)
		}
	}
}

func TestSyncDir(t *testing.T) {
	_, r := openTestRoot(t)
	if err := syncDir(r); err != nil {
		t.Fatalf("syncDir = %v", err)
	}
	r.Close()
	if err := syncDir(r); err == nil {
		t.Fatal("syncDir(closed root) succeeded")
	}
}
