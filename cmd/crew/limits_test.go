package main

import (
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/crew-dev/crew/internal/fdbudget"
	"github.com/crew-dev/crew/internal/supervise"
)

func TestTooFewDescriptorsIsCrewsFailure(t *testing.T) {
	err := &fdbudget.Error{Limit: 32, InUse: 29, Inherited: 24, Need: fdbudget.Need}
	if code := exitCodeFor(err); code != exitCrewFailure {
		t.Errorf("exit code %d, want %d", code, exitCrewFailure)
	}
	if hint := resourceHint(err); hint != "" {
		t.Errorf("a hint %q after a message that names the fix already", hint)
	}
	for _, args := range [][]string{nil, {"status"}, {supervise.Command, "r-1"}} {
		if err := checkOpenFiles(args); err != nil {
			t.Errorf("the test process itself is refused (%v): %v", args, err)
		}
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
