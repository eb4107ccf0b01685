package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/crew-dev/crew/internal/vocab"
)

// Issue 23, item 13a: warnings printed the line breaks of errors that
// errors.Join combined as a literal \n. crew's own line breaks are line
// breaks; a line break in text from the state root stays escaped.
func TestTermErrorKeepsCrewsLineBreaksOnly(t *testing.T) {
	planted := "runs/active/evil\ncrew: fake line" // a file name from the state root
	write := errors.New("write .r-1.json: no space left on device")
	closeErr := errors.New("close .r-1.json: input/output error")
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"plain", errors.New("no such file"), "no such file"},
		{"joined, wrapped", fmt.Errorf("run r-1: still cannot record its end: %w; retrying", errors.Join(write, closeErr)),
			"run r-1: still cannot record its end: write .r-1.json: no space left on device\n  close .r-1.json: input/output error; retrying"},
		{"a state root line break alone", fmt.Errorf("%s: not a run record; move it out of the way", planted),
			`runs/active/evil\ncrew: fake line: not a run record; move it out of the way`},
		{"a state root line break in a joined error", fmt.Errorf("run r-1: %w", errors.Join(fmt.Errorf("open %s: EIO", planted), closeErr)),
			"run r-1: open runs/active/evil\\ncrew: fake line: EIO\n  close .r-1.json: input/output error"},
		{"a state root line break around a joined error", fmt.Errorf("quarantine %s: %w", planted, errors.Join(write, closeErr)),
			"quarantine runs/active/evil\\ncrew: fake line: write .r-1.json: no space left on device\n  close .r-1.json: input/output error"},
		{"several %w", fmt.Errorf("cannot record it: %w; nor keep it in %s (%w)", errors.Join(write, closeErr), planted, closeErr),
			"cannot record it: write .r-1.json: no space left on device\n  close .r-1.json: input/output error; nor keep it in runs/active/evil\\ncrew: fake line (close .r-1.json: input/output error)"},
		{"joins within joins", errors.Join(errors.Join(write, closeErr), errors.New("remove: EIO")),
			"write .r-1.json: no space left on device\n  close .r-1.json: input/output error\n  remove: EIO"},
		{"escapes beside the line breaks", fmt.Errorf("task %s: %w", "x\x1b[2J", errors.Join(write, closeErr)),
			"task x\\x1b[2J: write .r-1.json: no space left on device\n  close .r-1.json: input/output error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := termError(c.err); got != c.want {
				t.Errorf("termError:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// Issue 24, item 2: an ambiguous run's candidates are listed one per
// line, and cobra's messages keep their layout; text from the state root
// in them (task names, states, ids) stays escaped, and the user's words
// are cobra's quotes.
func TestTermErrorLaysOutAmbiguityAndCobra(t *testing.T) {
	amb := &vocab.AmbiguousError{Arg: "r-2026", More: 2, Candidates: []vocab.Candidate{
		{ID: "r-20260101T000000.000000001Z-0123456789abcdef", Task: "build", State: "running"},
		{ID: "r-20260101T000000.000000002Z-fedcba9876543210", Task: "evil\ncrew: fake", State: "succeeded\x1b[2J"},
	}}
	want := "r-2026 is ambiguous: it fits 4 runs:\n" +
		"  r-20260101T000000.000000001Z-0123456789abcdef  running  build\n" +
		"  r-20260101T000000.000000002Z-fedcba9876543210  succeeded\\x1b[2J  \"evil\\ncrew: fake\"\n" +
		"  and 2 more\n" +
		"give more of the id"
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"ambiguous", amb, want},
		{"ambiguous, wrapped", &usageError{fmt.Errorf("logs: %w", amb)}, "logs: " + want},
		{"cobra", &cobraError{errors.New("unknown command \"strat\" for \"crew\"\n\nDid you mean this?\n\tstart\n\n")},
			"unknown command \"strat\" for \"crew\"\n\nDid you mean this?\n\tstart"},
		{"cobra, escapes", &cobraError{errors.New("unknown command \"a\\nb\" for \"crew\"\n\t\x1b[2Jx\u202e")},
			"unknown command \"a\\nb\" for \"crew\"\n\t\\x1b[2Jx\\u202e"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := termError(c.err); got != c.want {
				t.Errorf("termError:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}
