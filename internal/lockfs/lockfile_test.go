package lockfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// LockFile: shared locks of two open file descriptions coexist; an
// exclusive one waits for them, boundedly, and gets the file once they
// are gone.
func TestLockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b, c := open(), open(), open()
	if err := LockFile(a, false, 0); err != nil {
		t.Fatalf("shared lock = %v", err)
	}
	if err := LockFile(b, false, 0); err != nil {
		t.Fatalf("second shared lock = %v", err)
	}
	if err := LockFile(c, true, 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("exclusive lock while shared ones are held = %v, want ErrTimeout", err)
	}
	a.Close()
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Close()
	}()
	if err := LockFile(c, true, 10*time.Second); err != nil {
		t.Fatalf("exclusive lock once the shared ones went = %v", err)
	}
	d := open()
	if err := LockFile(d, false, 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("shared lock while an exclusive one is held = %v, want ErrTimeout", err)
	}
}
