package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ---------------------------------------------------------------------------
// Diagnostics: where crew's time goes. No targets here; these are the
// evidence behind a missed target.

func (h *harness) scenarioDiagnostics() error {
	r := &h.rep
	r.heading(2, "Diagnostics: where the time of a `crew start` goes")

	diskDir := h.path("tmp", "fsync")
	if err := os.MkdirAll(diskDir, 0o700); err != nil {
		return err
	}
	shm := h.tmpfs()

	// 1. fsync latency on the state root's filesystem (and tmpfs).
	n := h.cfg.n(200, 50)
	h.progress("diag: fsync latency, %d samples", n)
	disk, err := fsyncLatency(diskDir, n)
	if err != nil {
		return err
	}
	rows := [][]string{fsyncRow("state-root filesystem ("+fsType(h.env, diskDir)+")", disk)}
	if shm != "" {
		mem, err := fsyncLatency(shm, n)
		if err != nil {
			return err
		}
		rows = append(rows, fsyncRow("tmpfs (/dev/shm), for contrast", mem))
	}
	r.heading(3, "fsync latency on this disk")
	r.para(fmt.Sprintf("Measured in-process, %d samples each: write a 600-byte file (a record's size) under a temporary name, fsync it, rename it into place, fsync the directory — what crew's durable write does.", n))
	r.table([]string{"where", "fsync(file) median", "p90", "fsync(dir) median", "p90", "whole durable write median", "p90"}, rows)
	fileMed := percentile(disk.file, 50)
	dirMed := percentile(disk.dir, 50)

	// 2. Floors: what a process costs before crew does any work.
	ok := []int{0}
	cs := []contender{{name: "crew (disk root)", what: "crew --root DISK start t -- true",
		run: h.execRunner(h.env, ok, h.crew, "--root", h.path("roots", "diag-disk"), "start", "t", "--", "true")}}
	if shm != "" {
		cs = append(cs, contender{name: "crew (tmpfs root)", what: "crew --root /dev/shm/... start t -- true",
			run: h.execRunner(h.env, ok, h.crew, "--root", filepath.Join(shm, "root"), "start", "t", "--", "true")})
	}
	cs = append(cs,
		contender{name: "crew help", what: "crew help (Go runtime + cobra, no state root)", run: h.execRunner(h.env, ok, h.crew, "help")},
		contender{name: "Go no-op", what: "crewbench noop (a Go binary that exits)", run: h.execRunner(h.env, ok, h.self, "noop")})
	if p := h.peers["flock"]; p.bin != "" {
		cs = append(cs, contender{name: "flock", what: "flock FILE true", run: h.execRunner(h.env, ok, p.bin, h.path("tmp", "diag.flock"), "true")})
	}
	ss, err := h.alternate("diag floors", cs, h.cfg.n(100, 30), 3)
	if err != nil {
		return err
	}
	rows = nil
	for _, s := range ss {
		rows = append(rows, []string{s.name, "`" + s.what + "`", fmt.Sprint(len(s.samples)), ms(s.median()), ms(s.p90()), ms(s.cpuMedian())})
	}
	r.heading(3, "Floors, alternating")
	r.table([]string{"contender", "command", "runs", "median", "p90", "CPU median"}, rows)
	byName := map[string]*series{}
	for _, s := range ss {
		byName[s.name] = s
	}

	// 2b. Drift: does a start cost more as the minutes of churn pile up?
	if shm != "" {
		diskRoot, memRoot := h.path("roots", "diag-drift"), filepath.Join(shm, "drift")
		for _, root := range []string{diskRoot, memRoot} {
			if err := h.initRoot(root, 4); err != nil {
				return err
			}
		}
		block := h.cfg.n(100, 30)
		ds, err := h.alternate("diag drift", []contender{
			{name: "disk", what: "crew --root DISK start t -- true", run: h.execRunner(h.env, ok, h.crew, "--root", diskRoot, "start", "t", "--", "true")},
			{name: "tmpfs", what: "crew --root TMPFS start t -- true", run: h.execRunner(h.env, ok, h.crew, "--root", memRoot, "start", "t", "--", "true")},
		}, 3*block, 0)
		if err != nil {
			return err
		}
		rows = nil
		for b := range 3 {
			row := []string{fmt.Sprintf("%d–%d", b*block+1, (b+1)*block)}
			for _, s := range ds {
				blk := &series{samples: s.samples[b*block : (b+1)*block]}
				row = append(row, ms(blk.median()), ms(blk.cpuMedian()))
			}
			rows = append(rows, row)
		}
		r.heading(3, "Drift: the same start, over and over, on two fresh roots")
		r.para(fmt.Sprintf("%d starts on a new root on the state-root filesystem alternating with %d on a new root on tmpfs; medians per block of %d. Every start creates 6 files (2 owner-lock files, 3 record temporaries, 1 log) and frees 4 inodes (3 unlinks, and the provisioning record replaced by the running one); on ext4 without a journal each creation skips the inodes freed in the last minutes, so the cost grows with the churn; on tmpfs it does not.", 3*block, 3*block, block))
		r.table([]string{"starts", "disk: wall median", "disk: CPU median", "tmpfs: wall median", "tmpfs: CPU median"}, rows)
	}

	// 3. strace: syscalls and fsyncs of one crew start.
	var fsyncs int
	if _, err := exec.LookPath("strace"); err == nil {
		root := h.path("roots", "diag-strace")
		if err := h.initRoot(root, 4); err != nil {
			return err
		}
		// One start first, so the profile is of a steady-state start, not of
		// the first of the hour (which also creates the hour's finished-runs directory).
		if _, err := output(h.env, h.crew, "--root", root, "start", "t", "--", "true"); err != nil {
			return err
		}
		summary := h.path("tmp", "strace-c.txt")
		if _, err := output(h.env, "strace", "-f", "-c", "-o", summary, h.crew, "--root", root, "start", "t", "--", "true"); err != nil {
			return err
		}
		b, _ := os.ReadFile(summary)
		r.heading(3, "`strace -f -c` of one `crew start t -- true`")
		r.para("strace slows every syscall down, so the times in this table are inflated; the counts are exact.")
		r.code(trimStrace(string(b), 22))

		var totals []time.Duration
		for i := range 5 {
			trace := h.path("tmp", fmt.Sprintf("strace-fsync-%d.txt", i))
			if _, err := output(h.env, "strace", "-f", "-T", "-e", "trace=fsync,fdatasync,sync_file_range", "-o", trace,
				h.crew, "--root", root, "start", "t", "--", "true"); err != nil {
				return err
			}
			b, _ := os.ReadFile(trace)
			c, total := sumSyscallTimes(string(b), "fsync", "fdatasync", "sync_file_range")
			fsyncs = c
			totals = append(totals, total)
			if i == 0 {
				r.heading(3, "The fsyncs of one `crew start t -- true` (`strace -f -T -e trace=fsync,fdatasync`)")
				r.code(string(b))
			}
		}
		r.para(fmt.Sprintf("%d fsync calls per start; their time under strace, median of 5 starts: %s.", fsyncs, ms(percentile(totals, 50))))

		// fsyncs per recovered run.
		{
			rroot := h.path("roots", "diag-recover")
			if err := h.initRoot(rroot, 4); err != nil {
				return err
			}
			const dead = 200
			if err := writeDead(rroot, h.sample, dead); err != nil {
				return err
			}
			rsum := h.path("tmp", "strace-recover.txt")
			if _, err := output(h.env, "strace", "-f", "-c", "-o", rsum, h.crew, "--root", rroot, "recover", "--timeout", "10m"); err != nil {
				return err
			}
			b, _ := os.ReadFile(rsum)
			r.heading(3, fmt.Sprintf("`strace -f -c` of `crew recover` over %d dead runs", dead))
			r.code(trimStrace(string(b), 16))
			if c := straceCount(string(b), "fsync"); c > 0 {
				r.para(fmt.Sprintf("%.1f fsync calls per recovered run.", float64(c)/dead))
			}
		}
	} else {
		r.note("strace is not installed (`apt-get install -y strace`): no syscall profile.")
	}

	// 4. What the numbers say.
	var lines []string
	if d, t := byName["crew (disk root)"], byName["crew (tmpfs root)"]; d != nil && t != nil {
		lines = append(lines, fmt.Sprintf("- Durability, measured: crew on the disk root minus crew on tmpfs (where fsync returns at once) = %s − %s = **%s per start**, of which %s is CPU (%s − %s): time the kernel spends working, not waiting for the device.",
			ms(d.median()), ms(t.median()), ms(d.median()-t.median()), ms(d.cpuMedian()-t.cpuMedian()), ms(d.cpuMedian()), ms(t.cpuMedian())))
	}
	if fsyncs > 0 {
		lines = append(lines, fmt.Sprintf("- Durability, predicted: %d fsyncs per start (strace), of which 2 on directories; at this disk's medians (%s per file fsync, %s per directory fsync) ≈ **%s**.",
			fsyncs, ms(fileMed), ms(dirMed), ms(time.Duration(fsyncs-2)*fileMed+2*dirMed)))
	}
	if c, g := byName["crew help"], byName["Go no-op"]; c != nil && g != nil {
		lines = append(lines, fmt.Sprintf("- Process floor: a Go binary that does nothing takes %s; `crew help` (runtime + cobra command tree, no state root) %s.", ms(g.median()), ms(c.median())))
	}
	if t, f := byName["crew (tmpfs root)"], byName["flock"]; t != nil && f != nil {
		lines = append(lines, fmt.Sprintf("- Even with fsync free (tmpfs), crew ÷ flock = %s ÷ %s = **%.2f**.", ms(t.median()), ms(f.median()), ratio(t.median(), f.median())))
	}
	if len(lines) > 0 {
		r.heading(3, "Reading")
		r.para(strings.Join(lines, "\n"))
	}
	return nil
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
