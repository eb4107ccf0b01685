package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One run is one file beside the admission lock: the reservation at the
// start, the outcome (with the command's exit status) in the same file.
func TestRunLeavesOneFileWithReservationAndOutcome(t *testing.T) {
	root := t.TempDir()
	for i, c := range []struct {
		argv []string
		code int
	}{{[]string{"true"}, 0}, {[]string{"sh", "-c", "exit 3"}, 3}} {
		code, err := run(root, "t", c.argv)
		if err != nil || code != c.code {
			t.Fatalf("run %v = %d, %v; want %d", c.argv, code, err, c.code)
		}
		runs, _ := filepath.Glob(filepath.Join(root, "r-*"))
		if len(runs) != i+1 {
			t.Fatalf("after %d runs, %d run files: %v", i+1, len(runs), runs)
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 3 {
		t.Fatalf("%d entries, want the admission lock and two run files", len(entries))
	}
	runs, _ := filepath.Glob(filepath.Join(root, "r-*"))
	found := false
	for _, p := range runs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"state":"running"`)) || len(b) <= 1024 {
			t.Errorf("%s: no reservation, or no outcome after it: %q", p, b)
		}
		found = found || strings.Contains(string(b[1024:]), `"exitCode":3`)
	}
	if !found {
		t.Error("no run file records exit code 3")
	}
}
