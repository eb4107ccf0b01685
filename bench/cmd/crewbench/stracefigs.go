package main

import (
	"fmt"
	"os"
)

// Issue 25's strace figures of one start: the syscalls (`strace -f -c`,
// beside floor-cobra's) and the file ledger (ledger.go, beside the durable
// floor's, which must read 1 / 0 / 3: a check of the ledger itself).

const straceReps = 3

func (h diagScenario) straceFigures() error {
	fl, err := h.buildFloors()
	if err != nil {
		return err
	}
	root := h.path("roots", "diag-ledger")
	if err := h.initRoot(root, 4); err != nil {
		return err
	}
	durable := h.path("roots", "diag-ledger-durable")
	if err := os.MkdirAll(durable, 0o700); err != nil {
		return fmt.Errorf("durable floor's directory: %w", err)
	}
	crew := []string{h.crew, "--root", root, "start", "t", "--", "true"}
	floor := []string{fl.durable, "--root", durable, "start", "t", "--", "true"}
	// A first start of each, so the traced ones are steady-state starts
	// (not the first of the hour, which also makes the hour's directory).
	for _, argv := range [][]string{crew, floor} {
		if _, err := output(h.env, argv...); err != nil {
			return err
		}
	}
	if err := h.syscallFigure(crew, []string{fl.cobra, "start", "t", "--", "true"}); err != nil {
		return err
	}
	return h.ledgerFigure(root, crew, durable, floor)
}

// syscallFigure counts the syscalls of crew's start and floor-cobra's,
// straceReps times each, alternating.
func (h diagScenario) syscallFigure(crew, cobra []string) error {
	var crewN, cobraN []int
	for i := range straceReps {
		for _, c := range []struct {
			name string
			argv []string
			out  *[]int
		}{{"crew", crew, &crewN}, {"floor-cobra", cobra, &cobraN}} {
			summary := h.path("tmp", fmt.Sprintf("strace-count-%s-%d.txt", c.name, i))
			if _, err := output(h.env, append([]string{"strace", "-f", "-c", "-o", summary}, c.argv...)...); err != nil {
				return err
			}
			b, _ := os.ReadFile(summary)
			*c.out = append(*c.out, straceCount(string(b), "total"))
		}
	}
	med := medianInt(toInt64(crewN))
	h.rep.heading(3, "Syscalls per start (`strace -f -c`, the process and its child)")
	h.rep.table([]string{"command", "syscalls per start (each trace)", "median", "goal", "result"}, [][]string{
		{"`crew start t -- true`", fmt.Sprint(crewN), fmt.Sprint(med), "≤ 500", metStr(med <= 500)},
		{"`floor-cobra start t -- true`", fmt.Sprint(cobraN), fmt.Sprint(medianInt(toInt64(cobraN))), "—", "—"},
	})
	h.measured(figSyscalls, fmt.Sprintf("**%d** (floor-cobra %d)", med, medianInt(toInt64(cobraN))),
		fmt.Sprintf("%d traces each: crew %v, floor-cobra %v", straceReps, crewN, cobraN), med <= 500)
	return nil
}

// ledgerFigure traces the file ledger of crew's start and of the durable
// floor's, straceReps times each.
func (h diagScenario) ledgerFigure(root string, crew []string, durable string, floor []string) error {
	var crewL, floorL []ledger
	for i := range straceReps {
		l, err := h.traceLedger(root, crew, fmt.Sprintf("crew-%d", i))
		if err != nil {
			return err
		}
		crewL = append(crewL, l)
		if l, err = h.traceLedger(durable, floor, fmt.Sprintf("floor-%d", i)); err != nil {
			return err
		}
		floorL = append(floorL, l)
	}
	var rows [][]string
	for i, l := range crewL {
		rows = append(rows, ledgerRow(fmt.Sprintf("`crew start t -- true` (%d)", i+1), l))
	}
	for i, l := range floorL {
		rows = append(rows, ledgerRow(fmt.Sprintf("`floor-durable start t -- true` (%d)", i+1), l))
	}
	h.rep.heading(3, "Files per run (`strace -f -y`)")
	h.rep.table([]string{"start", "files created (of them directories)", "inodes freed", "of them with data", "renames (over an existing file)", "fsyncs"}, rows)
	h.rep.para("A creation is an open with O_CREAT (or creat, mkdir) that made a file under the state root: with O_EXCL or O_TMPFILE it did; without, when the path did not exist (the ledger starts from a walk of the root and follows every creation, rename and unlink). An inode is freed by an unlink or a rename over an existing file; \"with data\" means the file had been written to (on a disk mounted with `discard`, each is a synchronous discard). fsyncs are fsync and fdatasync calls anywhere. The durable floor must read 1 / 0 / 3: a check of the ledger.")
	w := worstLedger(crewL)
	met := w.created <= 2 && w.freedWithData == 0 && w.fsyncs <= 3
	f := worstLedger(floorL)
	h.measured(figFiles, fmt.Sprintf("**%d / %d (%d with data) / %d** (durable floor %d / %d / %d)", w.created, w.freed, w.freedWithData, w.fsyncs, f.created, f.freed, f.fsyncs),
		fmt.Sprintf("worst of %d traced starts; %d renames, %d over an existing file", straceReps, w.renames, w.renamesOver), met)
	if f.created != 1 || f.freed != 0 || f.fsyncs != 3 {
		return fmt.Errorf("the file ledger reads the durable floor as %d created / %d freed / %d fsyncs, not 1 / 0 / 3: the ledger misreads strace here", f.created, f.freed, f.fsyncs)
	}
	return nil
}

// traceLedger runs argv under strace -f -y and reads its file ledger in
// root.
func (h diagScenario) traceLedger(root string, argv []string, label string) (ledger, error) {
	known, err := walkRoot(root)
	if err != nil {
		return ledger{}, fmt.Errorf("walk %s: %w", root, err)
	}
	trace := h.path("tmp", "strace-ledger-"+label+".txt")
	if _, err := output(h.env, append([]string{"strace", "-f", "-y", "-qq", "-e", "signal=none", "-e", ledgerTrace, "-o", trace}, argv...)...); err != nil {
		return ledger{}, err
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		return ledger{}, err
	}
	return readLedger(string(b), root, known), nil
}

func ledgerRow(label string, l ledger) []string {
	return []string{label, fmt.Sprintf("%d (%d)", l.created, l.dirsCreated), fmt.Sprint(l.freed), fmt.Sprint(l.freedWithData),
		fmt.Sprintf("%d (%d)", l.renames, l.renamesOver), fmt.Sprint(l.fsyncs)}
}

// worstLedger is the largest of each count over the traced starts.
func worstLedger(ls []ledger) ledger {
	var w ledger
	for _, l := range ls {
		w.created, w.dirsCreated = max(w.created, l.created), max(w.dirsCreated, l.dirsCreated)
		w.freed, w.freedWithData = max(w.freed, l.freed), max(w.freedWithData, l.freedWithData)
		w.renames, w.renamesOver = max(w.renames, l.renames), max(w.renamesOver, l.renamesOver)
		w.fsyncs = max(w.fsyncs, l.fsyncs)
	}
	return w
}

func toInt64(xs []int) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = int64(x)
	}
	return out
}
