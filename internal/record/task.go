package record

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxTaskBytes bounds a task name.
const MaxTaskBytes = 200

// ValidateTask checks a task name. Task names are data, never file names:
// any non-empty UTF-8 string of at most 200 bytes without control
// characters is valid, and names that differ in any byte are different
// tasks.
func ValidateTask(name string) error {
	switch {
	case name == "":
		return errors.New("task name is empty")
	case len(name) > MaxTaskBytes:
		return fmt.Errorf("task name is %d bytes long; the limit is %d", len(name), MaxTaskBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("task name %q is not valid UTF-8", name)
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("task name %q has a control character (%U) at byte %d", name, r, i)
		}
	}
	return nil
}

// ReservedTaskPrefix and a digit begin every run id; task names that do
// too are reserved for run ids (see ValidateNewTask).
const ReservedTaskPrefix = "r-"

// ValidateNewTask checks the name of a task being started now. It is
// ValidateTask plus two rules that only new names follow, so that records
// an older crew wrote stay readable:
//
//   - Every character prints: no format characters (Unicode Cf: U+202E
//     RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH SPACE, ...), no line or
//     paragraph separators (Zl, Zp: U+2028), no spaces but U+0020, no
//     private-use, surrogate or unassigned code points. Such characters can
//     make a terminal show a name that is not the one stored.
//   - Names beginning with "r-" and a digit are reserved: every run id
//     begins so, and crew stop, wait, logs and status take a run id (or,
//     from issue 12 on, a unique prefix of one) where they take a task, so
//     such a name could pick another task's run.
func ValidateNewTask(name string) error {
	if err := ValidateTask(name); err != nil {
		return err
	}
	if err := printable("task name", name); err != nil {
		return err
	}
	if IsRunIDShaped(name) {
		return fmt.Errorf("task name %q is reserved: names that begin with %q and a digit look like run ids, "+
			"which crew stop, wait, logs and status accept in place of a task name, so such a task could be mistaken for another task's run; choose another name",
			name, ReservedTaskPrefix)
	}
	return nil
}

// IsRunIDShaped reports whether s begins like a run id: "r-" and a digit.
func IsRunIDShaped(s string) bool {
	return len(s) > len(ReservedTaskPrefix) && s[:len(ReservedTaskPrefix)] == ReservedTaskPrefix &&
		s[len(ReservedTaskPrefix)] >= '0' && s[len(ReservedTaskPrefix)] <= '9'
}

// printable refuses a name with a character that does not print as
// itself (see ValidateNewTask).
func printable(what, name string) error {
	for i, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%s %q has a character that does not print (%U) at byte %d: "+
				"it could make a terminal show something other than the name; use printable characters", what, name, r, i)
		}
	}
	return nil
}
