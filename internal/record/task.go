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
