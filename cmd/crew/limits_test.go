package main

import (
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

func TestLimitErrorNamesTheFix(t *testing.T) {
	err := &limitError{have: 6}
	msg := err.Error()
	for _, want := range []string{"may open only 6 files (ulimit -n)", fmt.Sprintf("crew needs at least %d", minOpenFiles), fmt.Sprintf("`ulimit -n %d`", minOpenFiles)} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if code := exitCodeFor(err); code != exitCrewFailure {
		t.Errorf("exit code %d, want %d", code, exitCrewFailure)
	}
	if err := checkOpenFiles(); err != nil {
		t.Errorf("the test process itself is refused: %v", err)
	}
}

func TestResourceHint(t *testing.T) {
	emfile := fmt.Errorf("reserve run r-1: %w", &fs.PathError{Op: "open", Path: "owners", Err: syscall.EMFILE})
	cases := []struct {
		err  error
		want string
	}{
		{emfile, "raise the limit with `ulimit -n`"},
		{fmt.Errorf("x: %w", syscall.ENFILE), "the system's table of open files is full"},
		{fmt.Errorf("cannot start: %w (raise the limit with `ulimit -n`)", syscall.EMFILE), ""},
		{fmt.Errorf("x: %w", syscall.ENOSPC), ""},
	}
	for _, c := range cases {
		got := resourceHint(c.err)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("resourceHint(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
