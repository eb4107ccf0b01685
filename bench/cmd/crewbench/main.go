// Command crewbench is crew's whole-process benchmark harness.
//
// It builds crew (a production build: `make build BIN=<tmp>/crew`,
// no tags), checks crew's state-root layout against a real run
// (layout.go, probe.go), then measures every figure of the performance
// issue (#25) for crew and for every peer installed on the machine —
// flock(1), GNU parallel's sem, task-spooler (tsp) and nq — and prints the
// results as Markdown on stdout (progress goes to stderr), ending with
// each figure against its goal (figures.go). Contenders of one comparison
// run alternately (A B A B ...), and every figure is a median (with its
// p10-p90 spread) over many runs, never a single run. Absent peers are skipped with a note and the apt-get line
// that would install them; the harness never installs anything itself.
//
// It is its own module (github.com/crew-dev/crew/bench) and imports nothing
// from crew: it drives the binary as a user does, reads what crew prints
// (--json), and writes state-root files (history, dead runs) in exactly the
// format the binary itself wrote, copied from records crew made.
//
// From bench/ (make bench runs it with -crew-src set to the repository):
//
//	go run ./cmd/crewbench -crew-src ..          # full run
//	go run ./cmd/crewbench -crew-src .. -quick   # fewer iterations, smaller history
//	go run ./cmd/crewbench -crew-src .. -only uncontended,rss -o /tmp/bench.md
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// scenarioNames are the values -only accepts, in the order they run.
var scenarioNames = []string{"uncontended", "diag", "concurrent", "active", "history", "recover", "rss", "etcd", "fleet", "correctness", "queue", "kill"}

type config struct {
	quick   bool
	crewSrc string // crew's source tree (root module) to build crew from
	crewBin string // prebuilt crew; skips the build
	tmpBase string // where work directories (and so the state roots) live
	only    map[string]bool
	history int // finished runs in the history scenarios
	dead    int // dead runs for crew recover
	// recoverLimit bounds the full-size recover pass (crew recover
	// --timeout); 0 means no bound.
	recoverLimit time.Duration
	out          string
	keep         bool
	// makeDead and makeHistory only prepare a state root (for profiling
	// crew by hand) and exit.
	makeDead, makeHistory string
	historyLayout         string // -make-history's layout: "today", or one of historyNames
}

// n picks an iteration count for the full or the -quick run.
func (c *config) n(full, quick int) int {
	if c.quick {
		return quick
	}
	return full
}

func (c *config) want(s string) bool { return len(c.only) == 0 || c.only[s] }

func main() {
	// Helper modes: the harness re-executes itself as the command under
	// test (an observer that records its own start and end), as a start
	// gate for concurrent callers, and as a do-nothing Go binary.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "observe":
			os.Exit(observeMain(os.Args[2:]))
		case "gate":
			os.Exit(gateMain(os.Args[2:]))
		case "victim":
			os.Exit(victimMain(os.Args[2:]))
		case "noop":
			os.Exit(0)
		}
	}
	os.Exit(run())
}

func run() int {
	c, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench:", err)
		return 2
	}
	h, err := newHarness(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crewbench:", err)
		return 1
	}
	cleanupOnSignal(h)
	defer h.cleanup()
	if err := h.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "crewbench:", err)
		return 1
	}
	if c.makeDead != "" || c.makeHistory != "" {
		if err := h.makeRoots(); err != nil {
			fmt.Fprintln(os.Stderr, "crewbench:", err)
			return 1
		}
		return 0
	}
	start := time.Now()
	failed := h.runAll()
	h.progress("done in %s", time.Since(start).Round(time.Second))
	h.rep.para(fmt.Sprintf("Whole harness run: %s.", time.Since(start).Round(time.Second)))
	if err := h.rep.flush(c.out); err != nil {
		fmt.Fprintln(os.Stderr, "crewbench:", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// cleanupOnSignal leaves nothing behind on ^C either: stop the runs and
// waiters the harness holds and the tsp servers, remove the work
// directories.
func cleanupOnSignal(h *harness) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "crewbench: %v: cleaning up\n", s)
		h.cleanup()
		os.Exit(130)
	}()
}

func parseFlags() (*config, error) {
	var c config
	var only string
	flag.BoolVar(&c.quick, "quick", false, "fewer iterations, a 10,000-run history, 2,000 dead runs (a smoke run, about 2 minutes)")
	flag.StringVar(&c.crewSrc, "crew-src", "", "crew's source tree, the directory of its root go.mod (default: the nearest parent of the working directory whose go.mod is module github.com/crew-dev/crew)")
	flag.StringVar(&c.crewBin, "crew", "", "use this crew binary instead of building one")
	flag.StringVar(&c.tmpBase, "tmp", os.TempDir(), "directory for the work directory; state roots live there, so its filesystem is the one measured as \"disk\"")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run: "+strings.Join(scenarioNames, ","))
	flag.IntVar(&c.history, "history", 0, "finished runs for the history scenarios (default 100000, -quick 10000)")
	flag.IntVar(&c.dead, "dead", 0, "dead runs for the recover scenario (default 10000, -quick 2000)")
	flag.DurationVar(&c.recoverLimit, "recover-limit", 45*time.Second, "bound on the full-size crew recover pass (its --timeout); 0: let it finish")
	flag.StringVar(&c.out, "o", "", "also write the Markdown report to this file")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory (state roots, observer files) for inspection")
	flag.StringVar(&c.makeDead, "make-dead", "", "only write -dead dead runs into this new state root (for profiling crew recover by hand), then exit")
	flag.StringVar(&c.makeHistory, "make-history", "", "only write -history finished runs (spread over today's hours) into this new state root, then exit")
	flag.StringVar(&c.historyLayout, "history-layout", "today", "with -make-history: spread the runs over today's hours (today), put them all in the current hour (one-hour), or spread them over 100 days (spread)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: crewbench [flags]\n\nBuilds crew and measures every figure of the performance issue, whole process\nagainst whole process, with flock(1), GNU parallel's sem, task-spooler and nq.\nMarkdown report on stdout.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		return nil, fmt.Errorf("unexpected arguments: %v", flag.Args())
	}
	var err error
	if c.only, err = parseOnly(only); err != nil {
		return nil, err
	}
	if c.history == 0 {
		c.history = c.n(100000, 10000)
	}
	if c.dead == 0 {
		c.dead = c.n(10000, 2000)
	}
	return &c, nil
}

// parseOnly reads -only: nil (everything) or the set of known names given.
func parseOnly(only string) (map[string]bool, error) {
	if only == "" {
		return nil, nil
	}
	set := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(scenarioNames, s) {
			return nil, fmt.Errorf("unknown scenario %q in -only (known: %s)", s, strings.Join(scenarioNames, ","))
		}
		set[s] = true
	}
	return set, nil
}
