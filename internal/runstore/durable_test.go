package runstore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// assertOnlyFiles checks that dir holds exactly the named entries: in
// particular, no leftover temporary files.
func assertOnlyFiles(t testing.TB, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want exactly %q", dir, got, want)
	}
}

func assertMode(t testing.TB, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %v, want %v", path, got, want)
	}
}

func readString(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteDurableCreatesAndReplaces(t *testing.T) {
	for name, write := range map[string]func(string, []byte) error{"WriteDurable": WriteDurable, "WriteAtomic": WriteAtomic} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "rec.json")
			if err := write(path, []byte("first version, rather long\n")); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, path); got != "first version, rather long\n" {
				t.Fatalf("content = %q", got)
			}
			assertMode(t, path, FilePerm)
			assertOnlyFiles(t, dir, "rec.json")

			// Shorter content replaces it entirely (no tail of the old one).
			if err := write(path, []byte("v2\n")); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, path); got != "v2\n" {
				t.Fatalf("content after replace = %q", got)
			}
			assertOnlyFiles(t, dir, "rec.json")

			// Empty content is written as such.
			if err := write(path, nil); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, path); got != "" {
				t.Fatalf("content after empty write = %q", got)
			}
			assertOnlyFiles(t, dir, "rec.json")
		})
	}
}

func TestWriteDurableReplacesByRename(t *testing.T) {
	// A reader that opened the old file keeps reading the old content: the
	// new one arrives by rename, never by rewriting the old inode in place.
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.json")
	if err := WriteDurable(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, _ := f.Stat()
	if err := WriteDurable(path, []byte("new content")); err != nil {
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
		t.Error("path still names the old inode after WriteDurable")
	}
}

func TestWriteDurableConcurrentWritersNeverTear(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.json")
	contents := []string{strings.Repeat("a", 10000), strings.Repeat("b", 20), strings.Repeat("c", 5000)}
	if err := WriteDurable(path, []byte(contents[0])); err != nil {
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
	for i := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for j := range 25 {
				if err := WriteAtomic(path, []byte(contents[(i+j)%len(contents)])); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	wg.Wait()
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

func TestWriteDurableMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(dir, "rec.json")
	for name, write := range map[string]func(string, []byte) error{"WriteDurable": WriteDurable, "WriteAtomic": WriteAtomic} {
		err := write(path, []byte("x"))
		if err == nil {
			t.Fatalf("%s into a missing directory succeeded", name)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("%s error %q does not name %s", name, err, path)
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s error %q does not wrap ErrNotExist", name, err)
		}
	}
}

func TestWriteDurableOntoDirectoryLeavesNoTemp(t *testing.T) {
	// The rename fails (target is a non-empty directory): the temporary
	// file is cleaned up and the target is untouched.
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.json")
	if err := os.MkdirAll(filepath.Join(path, "child"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteDurable(path, []byte("x")); err == nil {
		t.Fatal("WriteDurable onto a non-empty directory succeeded")
	}
	assertOnlyFiles(t, dir, "rec.json")
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Errorf("target changed: %v, %v", fi, err)
	}
}

func TestWriteDurableReadOnlyDirKeepsOldContent(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.json")
	if err := WriteDurable(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if err := WriteDurable(path, []byte("new")); err == nil {
		t.Fatal("WriteDurable into a read-only directory succeeded")
	}
	if got := readString(t, path); got != "old" {
		t.Errorf("content after failed write = %q, want old", got)
	}
	assertOnlyFiles(t, dir, "rec.json")
}

func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	if err := SyncDir(dir); err != nil {
		t.Fatalf("SyncDir(%s) = %v", dir, err)
	}
	missing := filepath.Join(dir, "missing")
	err := SyncDir(missing)
	if err == nil {
		t.Fatal("SyncDir(missing) succeeded")
	}
	if !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SyncDir(missing) = %v; want ErrNotExist naming %s", err, missing)
	}
}

func TestIsTempName(t *testing.T) {
	tests := map[string]bool{
		"":  false,
		"a": false,
		"r-20240102T030405.000000006Z-0123456789abcdef.json":            false,
		".r-20240102T030405.000000006Z-0123456789abcdef.json1234567890": true,
		".":          true,
		"..":         true,
		".crew.json": true,
		".hidden":    true,
		"a.json":     false,
	}
	for name, want := range tests {
		if got := IsTempName(name); got != want {
			t.Errorf("IsTempName(%q) = %v, want %v", name, got, want)
		}
	}
}
