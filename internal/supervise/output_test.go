package supervise

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type brokenWriter struct{ n int }

func (w *brokenWriter) Write([]byte) (int, error) {
	w.n++
	return 0, errors.New("broken pipe")
}

// A failing output stream costs neither the log nor the command: the tee
// takes everything, keeps logging, and stops writing to the broken stream.
func TestTeeKeepsLoggingWhenTheOutputFails(t *testing.T) {
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	out := &brokenWriter{}
	t1 := &tee{out: out, log: log}
	for _, chunk := range []string{"one\n", "two\n", "three\n"} {
		if n, err := t1.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want all of it taken, no error", chunk, n, err)
		}
	}
	if out.n != 1 {
		t.Errorf("the broken stream was written %d times, want once (then given up)", out.n)
	}
	if t1.outErr == nil || t1.logErr != nil {
		t.Errorf("outErr %v, logErr %v", t1.outErr, t1.logErr)
	}
	b, _ := os.ReadFile(log.Name())
	if string(b) != "one\ntwo\nthree\n" {
		t.Errorf("log = %q", b)
	}
	var warnings []string
	o := &output{tees: []*tee{t1, {log: log}}}
	o.report(func(err error) { warnings = append(warnings, err.Error()) }, "r-1", "/state/logs/r-1.log")
	if len(warnings) != 1 || !strings.Contains(warnings[0], "run r-1: crew's stdout failed (broken pipe); the command's output went on into the log /state/logs/r-1.log") {
		t.Errorf("warnings %q", warnings)
	}
}

// A failing log never stops the output.
func TestTeeKeepsTheOutputWhenTheLogFails(t *testing.T) {
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	log.Close() // every write now fails
	var out bytes.Buffer
	tee := &tee{out: &out, log: log}
	for _, chunk := range []string{"a", "b"} {
		if n, err := tee.Write([]byte(chunk)); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if out.String() != "ab" || tee.logErr == nil {
		t.Errorf("out %q, logErr %v", out.String(), tee.logErr)
	}
}
