package main

import (
	"fmt"
	"io"

	"github.com/crew-dev/crew/internal/vocab"
)

// printSlots is status's slots line, and with an unusable crew.json, the
// problem: status still shows everything else, since that is when an
// operator needs it most.
func printSlots(w io.Writer, snap *vocab.Snapshot) {
	p := snap.ConfigError
	if p == nil {
		fmt.Fprintf(w, "Slots: %d/%d in use\n", snap.SlotsInUse, snap.MaximumInProgress)
		return
	}
	fmt.Fprintf(w, "Config problem: %s\n", termSafe(p.Error))
	fmt.Fprintf(w, "Slots: %d in use; the cap is unknown, and no start is admitted until crew.json is fixed\n", snap.SlotsInUse)
}
