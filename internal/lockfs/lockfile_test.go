package lockfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// LockData: shared locks of two open file descriptions coexist; an
// exclusive one waits for them, boundedly, and gets the file once they
// are gone.
func TestLockData(t *testing.T) {
	dir, r := lockDirRoot(t)
	path := filepath.Join(dir, "data")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	lock := func(exclusive bool, timeout time.Duration) (*Lock, error) {
		l, err := LockData(r, "data", data, exclusive, timeout)
		if l != nil {
			t.Cleanup(func() { _ = l.Release() })
		}
		return l, err
	}
	a, err := lock(false, 0)
	if err != nil {
		t.Fatalf("shared lock = %v", err)
	}
	b, err := lock(false, 0)
	if err != nil {
		t.Fatalf("second shared lock = %v", err)
	}
	if _, err := lock(true, 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("exclusive lock while shared ones are held = %v, want ErrTimeout", err)
	}
	_ = a.Release()
	_ = b.Release()
	if _, err := lock(true, 0); err != nil {
		t.Fatalf("exclusive lock once the shared ones went = %v", err)
	}
	if _, err := lock(false, 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("shared lock while an exclusive one is held = %v, want ErrTimeout", err)
	}
}

// LockData proves that what it locked is the caller's file: a descriptor
// of a file that is no longer at the name is ErrGone, and nothing stays
// locked.
func TestLockDataReplacedFile(t *testing.T) {
	dir, r := lockDirRoot(t)
	path := filepath.Join(dir, "data")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := os.WriteFile(path+".new", []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if l, err := LockData(r, "data", old, true, 0); !errors.Is(err, ErrGone) {
		if l != nil {
			_ = l.Release()
		}
		t.Fatalf("LockData of a replaced file = %v, want ErrGone", err)
	}
	cur, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	l, err := LockData(r, "data", cur, true, 0)
	if err != nil {
		t.Fatalf("LockData of the file at the name after a refused one = %v; was something left locked?", err)
	}
	_ = l.Release()
}

func lockDirRoot(t *testing.T) (string, *os.Root) {
	t.Helper()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return dir, r
}
