package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/crew-dev/crew/internal/bytesize"
	"github.com/crew-dev/crew/internal/duration"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// initExtras are crew init's retention and log-cap flags.
type initExtras struct {
	retain    int
	retainFor time.Duration
	logMax    int64
}

func (x *initExtras) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&x.retain, "retain", 0, "keep the newest N finished runs (records and logs); 0: any number")
	f.Var(duration.NewValue(&x.retainFor, 0), "retain-for", "keep finished runs younger than D (30d, 12h); 0: any age")
	f.Var(bytesize.NewValue(&x.logMax, 0), "log-max", "cap each run's log at SIZE (10MiB, 1GB), keeping its first half and the newest output; 0: no cap")
}

// changes are the config changes the flags given ask for.
func (x *initExtras) changes(cmd *cobra.Command) ([]vocab.ConfigChange, error) {
	var out []vocab.ConfigChange
	f := cmd.Flags()
	if f.Changed("retain") {
		if x.retain < 0 {
			return nil, &usageError{fmt.Errorf("--retain must be at least 1 (or 0 to keep any number of finished runs), not %d", x.retain)}
		}
		out = append(out, vocab.SetRetain(x.retain))
	}
	if f.Changed("retain-for") {
		if x.retainFor < 0 {
			return nil, &usageError{fmt.Errorf("--retain-for must be positive (or 0 to keep finished runs of any age), not %s", duration.Format(x.retainFor))}
		}
		out = append(out, vocab.SetRetainFor(x.retainFor))
	}
	if f.Changed("log-max") {
		if x.logMax > 0 && x.logMax < record.MinLogMax {
			return nil, &usageError{fmt.Errorf("--log-max %s is too small: the least is %s (or 0 for no cap)", bytesize.Flag(x.logMax), bytesize.Flag(record.MinLogMax))}
		}
		out = append(out, vocab.SetLogMax(x.logMax))
	}
	return out, nil
}

// printLimits says what crew.json now keeps and caps.
func printLimits(w io.Writer, cfg record.Config) {
	fmt.Fprintf(w, "crew: retention: %s\n", describeRetention(cfg))
	if cfg.LogMax > 0 {
		fmt.Fprintf(w, "crew: logs capped at %s per run\n", bytesize.Format(cfg.LogMax))
	}
}

// describeRetention says in words what the configured retention keeps.
func describeRetention(cfg record.Config) string {
	switch {
	case cfg.KeepsEverything():
		return "keep every finished run"
	case cfg.Retain > 0 && cfg.RetainFor > 0:
		return fmt.Sprintf("keep the newest %d finished runs, and every run that finished less than %s ago", cfg.Retain, duration.Format(cfg.RetainFor))
	case cfg.Retain > 0:
		return fmt.Sprintf("keep the newest %d finished runs", cfg.Retain)
	}
	return fmt.Sprintf("keep the runs that finished less than %s ago", duration.Format(cfg.RetainFor))
}
