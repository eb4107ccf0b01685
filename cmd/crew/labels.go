package main

import (
	"fmt"

	"github.com/crew-dev/crew/internal/record"
)

// labelsFlag is a repeatable --label KEY=VALUE: crew start's labels for
// its run, and status's, history's and wait's filter (every label given
// must be carried).
type labelsFlag struct{ labels record.Labels }

func (f *labelsFlag) String() string { return f.labels.String() }

func (f *labelsFlag) Type() string { return "KEY=VALUE" }

// Set takes one --label; the errors are crew's own words for a label that
// cannot be stored (a usage error, exit 64, through flagError).
func (f *labelsFlag) Set(s string) error {
	k, v, err := record.ParseLabel(s)
	if err != nil {
		return err
	}
	if old, ok := f.labels[k]; ok {
		return fmt.Errorf("label %s is given twice (%s=%s and %s=%s); give each key once", k, k, old, k, v)
	}
	if len(f.labels) == record.MaxLabels {
		return fmt.Errorf("more than %d labels; the limit is %d", record.MaxLabels, record.MaxLabels)
	}
	if f.labels == nil {
		f.labels = record.Labels{}
	}
	f.labels[k] = v
	return nil
}
