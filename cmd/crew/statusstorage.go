package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/bytesize"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// printStorage is status's retention, log cap and size lines.
func printStorage(w io.Writer, snap *vocab.Snapshot) {
	if snap.ConfigError == nil {
		cfg := record.Config{Retain: snap.Retention.Retain, RetainFor: time.Duration(snap.Retention.RetainForSeconds) * time.Second}
		fmt.Fprintf(w, "Retention: %s\n", describeRetention(cfg))
		if snap.LogMax > 0 {
			fmt.Fprintf(w, "Log cap: %s per run\n", bytesize.Format(snap.LogMax))
		}
	}
	if z := snap.Size; z != nil {
		approx, how := "", ""
		switch {
		case len(z.Crowded) > 0:
			approx, how = "at least about ", fmt.Sprintf(" (hour %s holds more runs than status counts: see status --json)", strings.Join(z.Crowded, ", "))
		case !z.Exact:
			approx, how = "about ", " (estimated: see status --json for how)"
		}
		fmt.Fprintf(w, "Size: %s%s: records %s (%d), logs %s (%d)%s\n", approx, bytesize.Format(z.Bytes),
			bytesize.Format(z.Records.Bytes), z.Records.Files, bytesize.Format(z.Logs.Bytes), z.Logs.Files, how)
	}
}
