package record

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Labels are a run's KEY=VALUE pairs (crew start --label), stored in its
// record and its queue ticket, for status, history and wait to select
// runs by (a CI pipeline's runs, say). They are data like a task name:
// only ever compared and shown, never a file name.
type Labels map[string]string

// Bounds on labels, so that a record stays small and a table readable.
const (
	MaxLabels          = 16
	MaxLabelKeyBytes   = 64
	MaxLabelValueBytes = 256
)

// ParseLabel splits one --label argument, KEY=VALUE, and validates both.
func ParseLabel(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("label %q has no \"=\": give KEY=VALUE, as in pipeline=1234", s)
	}
	if err := ValidateLabel(key, value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// ValidateLabel checks one label: a key of 1 to 64 bytes without "=" or
// spaces, a value of 1 to 256 bytes, both of characters that print.
func ValidateLabel(key, value string) error {
	switch {
	case key == "":
		return errors.New("label key is empty: give KEY=VALUE, as in pipeline=1234")
	case len(key) > MaxLabelKeyBytes:
		return fmt.Errorf("label key is %d bytes long; the limit is %d", len(key), MaxLabelKeyBytes)
	case strings.ContainsAny(key, "= "):
		return fmt.Errorf("label key %q has a space or \"=\"; keys are one word", key)
	case value == "":
		return fmt.Errorf("label %s has an empty value: give KEY=VALUE (an unset variable in --label %s=$VAR?)", key, key)
	case len(value) > MaxLabelValueBytes:
		return fmt.Errorf("label %s's value is %d bytes long; the limit is %d", key, len(value), MaxLabelValueBytes)
	case !utf8.ValidString(key) || !utf8.ValidString(value):
		return fmt.Errorf("label %q=%q is not valid UTF-8", key, value)
	}
	if err := printable("label key", key); err != nil {
		return err
	}
	return printable("label value", value)
}

// Validate checks every label and their number.
func (l Labels) Validate() error {
	if len(l) > MaxLabels {
		return fmt.Errorf("%d labels; the limit is %d", len(l), MaxLabels)
	}
	for _, k := range l.Keys() {
		if err := ValidateLabel(k, l[k]); err != nil {
			return err
		}
	}
	return nil
}

// Keys are the labels' keys in order.
func (l Labels) Keys() []string { return slices.Sorted(maps.Keys(l)) }

// Has reports whether l carries every label of want (all of them: a
// filter of several labels is their conjunction).
func (l Labels) Has(want Labels) bool {
	for k, v := range want {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// String is the labels as given: KEY=VALUE, comma-separated, by key.
func (l Labels) String() string {
	parts := make([]string, 0, len(l))
	for _, k := range l.Keys() {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}
