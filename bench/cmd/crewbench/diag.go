package main

import (
	"cmp"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Diagnostics: where crew's time goes. No goals here; these are the
// evidence behind a missed one.

// diagFacts is what the diagnostics steps pass on to the reading at the end.
type diagFacts struct {
	fileMed, dirMed time.Duration // fsync latency on the work directory's filesystem
	floors          map[string]*series
	fsyncs          int    // fsync calls per start, from strace
	noop            string // the Go no-op timed in the floors
}

func (h diagScenario) scenarioDiagnostics() error {
	h.rep.heading(2, "Diagnostics: where the time of a `crew start` goes")
	d := &diagFacts{floors: map[string]*series{}}
	for _, step := range []func(*diagFacts) error{h.diagFsync, h.diagFloors, h.diagDrift, h.diagStrace} {
		if err := step(d); err != nil {
			return err
		}
	}
	h.diagReading(d)
	return nil
}

// diagFsync: fsync latency on the state root's filesystem (and tmpfs).
func (h diagScenario) diagFsync(d *diagFacts) error {
	diskDir := h.path("tmp", "fsync")
	if err := os.MkdirAll(diskDir, 0o700); err != nil {
		return fmt.Errorf("fsync latency: %w", err)
	}
	n := h.cfg.n(200, 50)
	h.progress("diag: fsync latency, %d samples", n)
	disk, err := fsyncLatency(diskDir, n)
	if err != nil {
		return fmt.Errorf("fsync latency: %w", err)
	}
	rows := [][]string{fsyncRow("state-root filesystem ("+h.diskLabel()+")", disk)}
	if shm := h.tmpfs(); shm != "" {
		mem, err := fsyncLatency(shm, n)
		if err != nil {
			return fmt.Errorf("fsync latency on tmpfs: %w", err)
		}
		rows = append(rows, fsyncRow("tmpfs (/dev/shm), for contrast", mem))
	}
	h.rep.heading(3, "fsync latency on this disk")
	h.rep.para(fmt.Sprintf("Measured in-process, %d samples each: write a 600-byte file (a record's size) under a temporary name, fsync it, rename it into place, fsync the directory — what crew's durable write does.", n))
	h.rep.table([]string{"where", "fsync(file) median", "p90", "fsync(dir) median", "p90", "whole durable write median", "p90"}, rows)
	d.fileMed, d.dirMed = percentile(disk.file, 50), percentile(disk.dir, 50)
	return nil
}

// diagFloors: what a process costs before crew does any work.
func (h diagScenario) diagFloors(d *diagFacts) error {
	ok := []int{0}
	cs := []contender{{name: "crew (disk root)", what: "crew --root DISK start t -- true",
		run: h.execRunner(h.env, ok, h.crew, "--root", h.path("roots", "diag-disk"), "start", "t", "--", "true")}}
	if shm := h.tmpfs(); shm != "" {
		cs = append(cs, contender{name: "crew (tmpfs root)", what: "crew --root /dev/shm/... start t -- true",
			run: h.execRunner(h.env, ok, h.crew, "--root", filepath.Join(shm, "root"), "start", "t", "--", "true")})
	}
	cs = append(cs,
		contender{name: "crew help", what: "crew help (Go runtime + cobra, no state root)", run: h.execRunner(h.env, ok, h.crew, "help")})
	fl, err := h.buildFloors()
	noop, supervisor := fl.noop, fl.cobra
	if err != nil {
		h.progress("diag: floor programs not built (%v); the crewbench binary stands in for the no-op", err)
		noop = ""
		cs = append(cs, contender{name: "Go no-op", what: "crewbench noop (the harness binary, exiting at once)", run: h.execRunner(h.env, ok, h.self, "noop")})
	} else {
		cs = append(cs,
			contender{name: "Go + cobra + fork/exec", what: "floor-cobra start t -- true (cobra parses, starts `true` in its own group, waits)", run: h.execRunner(h.env, ok, supervisor, "start", "t", "--", "true")},
			contender{name: "Go no-op", what: "floor-noop (`func main() {}`)", run: h.execRunner(h.env, ok, noop)})
	}
	d.noop = cmp.Or(noop, h.self)
	if p := h.peers["flock"]; p.bin != "" {
		cs = append(cs, contender{name: "flock", what: "flock FILE true", run: h.execRunner(h.env, ok, p.bin, h.path("tmp", "diag.flock"), "true")})
	}
	ss, err := h.alternate("diag floors", cs, h.cfg.n(100, 30), 3)
	if err != nil {
		return err
	}
	var rows [][]string
	for _, s := range ss {
		rows = append(rows, seriesRow(s.name, s))
		d.floors[s.name] = s
	}
	h.rep.heading(3, "Floors, alternating")
	h.rep.table([]string{"contender", "command", "runs", "median", "p10–p90", "CPU median"}, rows)
	h.rep.para(fmt.Sprintf("Linkage (ELF program interpreter): crew %s; the Go no-op %s. A dynamically linked Go binary pays for the dynamic loader and libc set-up at every start. The two floor programs (`bench/cmd/floor-noop`, `bench/cmd/floor-cobra`) are built as crew is: `CGO_ENABLED=0 go build -trimpath`.",
		linkage(h.crew), linkage(d.noop)))
	return nil
}

// diagDrift: does a start cost more as the minutes of churn pile up?
func (h diagScenario) diagDrift(*diagFacts) error {
	shm := h.tmpfs()
	if shm == "" {
		return nil
	}
	diskRoot, memRoot := h.path("roots", "diag-drift"), filepath.Join(shm, "drift")
	for _, root := range []string{diskRoot, memRoot} {
		if err := h.initRoot(root, 4); err != nil {
			return err
		}
	}
	ok := []int{0}
	block := h.cfg.n(100, 30)
	ds, err := h.alternate("diag drift", []contender{
		{name: "disk", what: "crew --root DISK start t -- true", run: h.execRunner(h.env, ok, h.crew, "--root", diskRoot, "start", "t", "--", "true")},
		{name: "tmpfs", what: "crew --root TMPFS start t -- true", run: h.execRunner(h.env, ok, h.crew, "--root", memRoot, "start", "t", "--", "true")},
	}, 3*block, 0)
	if err != nil {
		return err
	}
	var rows [][]string
	for b := range 3 {
		row := []string{fmt.Sprintf("%d–%d", b*block+1, (b+1)*block)}
		for _, s := range ds {
			blk := &series{samples: s.samples[b*block : (b+1)*block]}
			row = append(row, ms(blk.median()), ms(blk.cpuMedian()))
		}
		rows = append(rows, row)
	}
	h.rep.heading(3, "Drift: the same start, over and over, on two fresh roots")
	h.rep.para(fmt.Sprintf("%d starts on a new root on the state-root filesystem alternating with %d on a new root on tmpfs; medians per block of %d. Every start creates files (owner locks, record temporaries, a log) and frees inodes; on ext4 without a journal each creation skips the inodes freed in the last minutes, so the cost grows with the churn; on tmpfs it does not.", 3*block, 3*block, block))
	h.rep.table([]string{"starts", "disk: wall median", "disk: CPU median", "tmpfs: wall median", "tmpfs: CPU median"}, rows)
	return nil
}

// diagStrace: syscalls and fsyncs of one crew start, and of a recover.
func (h diagScenario) diagStrace(d *diagFacts) error {
	if _, err := exec.LookPath("strace"); err != nil {
		h.rep.note("strace is not installed (`apt-get install -y strace`): no syscall profile.")
		h.notMeasured(figFiles, "strace is not installed (`apt-get install -y strace`)")
		h.notMeasured(figSyscalls, "strace is not installed (`apt-get install -y strace`)")
		return nil
	}
	if err := h.straceStart(d); err != nil {
		return err
	}
	if err := h.straceFigures(); err != nil {
		return err
	}
	return h.straceRecover()
}

func (h diagScenario) straceStart(d *diagFacts) error {
	root := h.path("roots", "diag-strace")
	if err := h.initRoot(root, 4); err != nil {
		return err
	}
	start := []string{h.crew, "--root", root, "start", "t", "--", "true"}
	// One start first, so the profile is of a steady-state start, not of
	// the first of the hour (which also creates the hour's finished-runs
	// directory).
	if _, err := output(h.env, start...); err != nil {
		return err
	}
	summary := h.path("tmp", "strace-c.txt")
	if _, err := output(h.env, append([]string{"strace", "-f", "-c", "-o", summary}, start...)...); err != nil {
		return err
	}
	b, _ := os.ReadFile(summary)
	h.rep.heading(3, "`strace -f -c` of one `crew start t -- true`")
	h.rep.para("strace slows every syscall down, so the times in this table are inflated; the counts are exact.")
	h.rep.code(trimStrace(string(b), 22))
	var totals []time.Duration
	for i := range 5 {
		trace := h.path("tmp", fmt.Sprintf("strace-fsync-%d.txt", i))
		if _, err := output(h.env, append([]string{"strace", "-f", "-T", "-e", "trace=fsync,fdatasync,sync_file_range", "-o", trace}, start...)...); err != nil {
			return err
		}
		b, _ := os.ReadFile(trace)
		c, total := sumSyscallTimes(string(b), "fsync", "fdatasync", "sync_file_range")
		d.fsyncs = c
		totals = append(totals, total)
		if i == 0 {
			h.rep.heading(3, "The fsyncs of one `crew start t -- true` (`strace -f -T -e trace=fsync,fdatasync`)")
			h.rep.code(string(b))
		}
	}
	h.rep.para(fmt.Sprintf("%d fsync calls per start; their time under strace, median of 5 starts: %s.", d.fsyncs, ms(percentile(totals, 50))))
	return nil
}

// straceRecover: fsyncs per recovered run.
func (h diagScenario) straceRecover() error {
	root := h.path("roots", "diag-recover")
	if err := h.initRoot(root, 4); err != nil {
		return err
	}
	const dead = 200
	if err := writeDead(root, h.sample, dead); err != nil {
		return err
	}
	summary := h.path("tmp", "strace-recover.txt")
	if _, err := output(h.env, "strace", "-f", "-c", "-o", summary, h.crew, "--root", root, "recover", "--timeout", "10m"); err != nil {
		return err
	}
	b, _ := os.ReadFile(summary)
	h.rep.heading(3, fmt.Sprintf("`strace -f -c` of `crew recover` over %d dead runs", dead))
	h.rep.code(trimStrace(string(b), 16))
	if c := straceCount(string(b), "fsync"); c > 0 {
		h.rep.para(fmt.Sprintf("%.1f fsync calls per recovered run.", float64(c)/dead))
	}
	return nil
}

// diagReading: what the numbers say.
func (h diagScenario) diagReading(d *diagFacts) {
	var lines []string
	if disk, mem := d.floors["crew (disk root)"], d.floors["crew (tmpfs root)"]; disk != nil && mem != nil {
		lines = append(lines, fmt.Sprintf("- Durability, measured: crew on the disk root minus crew on tmpfs (where fsync returns at once) = %s − %s = **%s per start**, of which %s is CPU (%s − %s): time the kernel spends working, not waiting for the device.",
			ms(disk.median()), ms(mem.median()), ms(disk.median()-mem.median()), ms(disk.cpuMedian()-mem.cpuMedian()), ms(disk.cpuMedian()), ms(mem.cpuMedian())))
	}
	if d.fsyncs > 0 {
		lines = append(lines, fmt.Sprintf("- Durability, predicted: %d fsyncs per start (strace), of which 2 on directories; at this disk's medians (%s per file fsync, %s per directory fsync) ≈ **%s**.",
			d.fsyncs, ms(d.fileMed), ms(d.dirMed), ms(time.Duration(max(0, d.fsyncs-2))*d.fileMed+2*d.dirMed)))
	}
	if c, g := d.floors["crew help"], d.floors["Go no-op"]; c != nil && g != nil {
		lines = append(lines, fmt.Sprintf("- Process floor: a Go binary that does nothing (%s) takes %s; `crew help` (runtime + cobra command tree, no state root; %s) %s.",
			linkage(d.noop), ms(g.median()), linkage(h.crew), ms(c.median())))
	}
	if t, s, f := d.floors["crew (tmpfs root)"], d.floors["Go + cobra + fork/exec"], d.floors["flock"]; t != nil && s != nil && f != nil {
		lines = append(lines, fmt.Sprintf("- Supervisor floor: a static Go program with cobra that only parses `start t -- true`, starts `true` in its own process group and waits takes %s, %.2f× flock (%s). crew on tmpfs takes %s more than that floor: crew's own work (admission, records, lock files, log and output capture, the final record) and the size of its binary (more code to fault in at start and to unmap at exit).",
			ms(s.median()), ratio(s.median(), f.median()), ms(f.median()), ms(t.median()-s.median())))
	}
	if t, f := d.floors["crew (tmpfs root)"], d.floors["flock"]; t != nil && f != nil {
		lines = append(lines, fmt.Sprintf("- Even with fsync free (tmpfs), crew ÷ flock = %s ÷ %s = **%.2f**.", ms(t.median()), ms(f.median()), ratio(t.median(), f.median())))
	}
	if len(lines) > 0 {
		h.rep.heading(3, "Reading")
		h.rep.para(strings.Join(lines, "\n"))
	}
}

// linkage says whether an ELF binary is statically or dynamically linked
// (it has a program interpreter, the dynamic loader).
func linkage(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "linkage unknown (" + err.Error() + ")"
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return "dynamically linked (`" + strings.TrimRight(string(b), "\x00") + "`)"
			}
			return "dynamically linked"
		}
	}
	return "statically linked"
}

type fsyncSamples struct{ file, dir, total []time.Duration }

func fsyncRow(label string, s fsyncSamples) []string {
	return []string{label, us(percentile(s.file, 50)), us(percentile(s.file, 90)), us(percentile(s.dir, 50)), us(percentile(s.dir, 90)),
		us(percentile(s.total, 50)), us(percentile(s.total, 90))}
}

// fsyncLatency times crew's durable-write pattern n times in dir.
func fsyncLatency(dir string, n int) (fsyncSamples, error) {
	var s fsyncSamples
	data := []byte(strings.Repeat("x", 599) + "\n")
	for i := range n {
		tmp := filepath.Join(dir, fmt.Sprintf(".rec-%d.json.tmp", i))
		final := filepath.Join(dir, fmt.Sprintf("rec-%d.json", i))
		t0 := time.Now()
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return s, err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return s, err
		}
		t1 := time.Now()
		if err := f.Sync(); err != nil {
			f.Close()
			return s, err
		}
		t2 := time.Now()
		f.Close()
		if err := os.Rename(tmp, final); err != nil {
			return s, err
		}
		d, err := os.Open(dir)
		if err != nil {
			return s, err
		}
		t3 := time.Now()
		if err := d.Sync(); err != nil {
			d.Close()
			return s, err
		}
		t4 := time.Now()
		d.Close()
		s.file = append(s.file, t2.Sub(t1))
		s.dir = append(s.dir, t4.Sub(t3))
		s.total = append(s.total, t4.Sub(t0))
	}
	return s, nil
}

// tmpfs is a private directory on /dev/shm when that is a tmpfs (made
// once, removed at clean-up); "" otherwise.
func (h *harness) tmpfs() string {
	if h.shm != "" || fsType(h.env, "/dev/shm") != "tmpfs" {
		return h.shm
	}
	d, err := os.MkdirTemp("/dev/shm", "crewbench-")
	if err != nil {
		return ""
	}
	h.atCleanup(func() { _ = os.RemoveAll(d) })
	h.shm = d
	return d
}

// fsType is the filesystem type of dir as `stat -f` names it (ext4 is
// "ext2/ext3"), or "unknown".
func fsType(env []string, dir string) string {
	out, err := output(env, "stat", "-f", "-c", "%T", dir)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(out)
}

// trimStrace keeps the header and the top rows of a strace -c table, and
// its total line.
func trimStrace(s string, top int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	var out []string
	rows := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "% time") {
			lines = lines[i:]
			break
		}
	}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "% time"), strings.HasPrefix(l, "------"), strings.Contains(l, "total"):
			out = append(out, l)
		case rows < top:
			out = append(out, l)
			rows++
		}
	}
	return strings.Join(out, "\n")
}

var straceDur = regexp.MustCompile(`<([0-9.]+)>\s*$`)

// sumSyscallTimes counts the calls of a strace -f -T log to any of the
// named syscalls, and sums their times (a call interrupted by another
// thread's line has its time on its "resumed" line).
func sumSyscallTimes(log string, names ...string) (int, time.Duration) {
	n := 0
	var total time.Duration
	for _, l := range strings.Split(log, "\n") {
		call, resumed := false, false
		for _, name := range names {
			call = call || strings.Contains(l, " "+name+"(")
			resumed = resumed || strings.Contains(l, "<... "+name+" resumed>")
		}
		if call {
			n++
		}
		if call || resumed {
			if m := straceDur.FindStringSubmatch(l); m != nil {
				f, _ := strconv.ParseFloat(m[1], 64)
				total += time.Duration(f * float64(time.Second))
			}
		}
	}
	return n, total
}

// straceCount reads the calls column of one syscall in a strace -c table.
func straceCount(table, name string) int {
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && f[len(f)-1] == name {
			n, _ := strconv.Atoi(f[3])
			return n
		}
	}
	return 0
}
