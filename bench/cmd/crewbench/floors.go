package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// floorBins are the floor programs of the harness's module: the anchors
// of issue 25's figures.
type floorBins struct {
	noop    string // floor-noop: `func main() {}`
	cobra   string // floor-cobra: cobra parse, fork/exec/wait in its own group
	durable string // floor-durable: floor-cobra plus one file, three fsyncs
}

// buildFloors builds the floor programs (the working directory is inside
// the harness's module: make bench runs the harness from bench/) the way
// crew's Makefile builds crew: static, -trimpath.
func (h *harness) buildFloors() (floorBins, error) {
	fl := floorBins{noop: h.path("floor-noop"), cobra: h.path("floor-cobra"), durable: h.path("floor-durable")}
	for out, pkg := range map[string]string{
		fl.noop:    "github.com/crew-dev/crew/bench/cmd/floor-noop",
		fl.cobra:   "github.com/crew-dev/crew/bench/cmd/floor-cobra",
		fl.durable: "github.com/crew-dev/crew/bench/cmd/floor-durable",
	} {
		if _, err := os.Stat(out); err == nil {
			continue // built for an earlier scenario
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
		cmd.Env = withEnv(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fl, fmt.Errorf("go build %s: %w: %s", pkg, err, strings.TrimSpace(string(b)))
		}
	}
	return fl, nil
}
