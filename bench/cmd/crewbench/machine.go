package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// machine reports what the numbers were measured on: the report's header.
func (h machineReport) machine() {
	r := &h.rep
	r.heading(1, "crew benchmark results")
	quick := ""
	if h.cfg.quick {
		quick = " (-quick: fewer iterations, smaller history; not for publication)"
	}
	r.para("Produced by `make bench` (`cd bench && go run ./cmd/crewbench -crew-src ..`)" + quick + ". Every figure is a median over many runs, with its spread (p10–p90); contenders of one comparison run alternately (A B A B ...).")
	rows := h.hostRows()
	rows = append(rows, h.filesystemRows()...)
	rows = append(rows, h.toolRows()...)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		rows = append(rows, []string{"load average at start", "`" + strings.TrimSpace(string(load)) + "`"})
	}
	r.table([]string{"", ""}, rows)
	for _, name := range peerOrder {
		if p := h.peers[name]; p.bin == "" {
			r.note(fmt.Sprintf("%s is not installed, so its columns are skipped. Install it with `%s`.", name, p.install))
		}
	}
}

func (h machineReport) hostRows() [][]string {
	rows := [][]string{{"date (UTC)", time.Now().UTC().Format("2006-01-02 15:04")}}
	cpu := firstMatch("/proc/cpuinfo", "model name")
	rows = append(rows, []string{"CPU", fmt.Sprintf("%d cores (runtime.NumCPU), %s", runtime.NumCPU(), cpu)})
	if mem := firstMatch("/proc/meminfo", "MemTotal"); mem != "" {
		rows = append(rows, []string{"memory", mem})
	}
	if out, err := output(h.env, "uname", "-srm"); err == nil {
		rows = append(rows, []string{"kernel", strings.TrimSpace(out)})
	}
	return rows
}

// filesystemRows describe the disk state roots (the work directory) and
// the tmpfs ones.
func (h machineReport) filesystemRows() [][]string {
	fs, dev, mnt := filesystemOf(h.env, h.work)
	rows := [][]string{{"state roots (\"disk\")", "`" + h.work + "`"}, {"filesystem of the state roots", fs}}
	if opts := mountOptions(mnt); opts != "" {
		rows = append(rows, []string{"mount options", "`" + opts + "`"})
	}
	if dev != "" {
		rows = append(rows, []string{"block device", blockDevice(dev)})
		if j := ext4Journal(dev); j != "" {
			rows = append(rows, []string{"ext4 journal", j})
		}
	}
	if shm := h.tmpfs(); shm != "" {
		desc, _, _ := filesystemOf(h.env, shm)
		rows = append(rows, []string{"state roots (\"tmpfs\")", "`" + shm + "`: " + desc})
	} else {
		rows = append(rows, []string{"state roots (\"tmpfs\")", "none: `/dev/shm` is not a tmpfs (`stat -f -c %T /dev/shm`: " + fsType(h.env, "/dev/shm") + "), so the tmpfs figure is not measured"})
	}
	return rows
}

func (h machineReport) toolRows() [][]string {
	rows := [][]string{{"Go (harness)", runtime.Version()}}
	if out, err := output(h.env, "go", "version"); err == nil {
		rows = append(rows, []string{"Go (crew build)", strings.TrimSpace(out)})
	}
	rows = append(rows, []string{"crew", h.crewVersion()})
	for _, name := range peerOrder {
		p := h.peers[name]
		if p.bin == "" {
			rows = append(rows, []string{name, "not installed (" + p.note + "): `" + p.install + "`"})
			continue
		}
		rows = append(rows, []string{name, fmt.Sprintf("`%s`: %s", p.bin, p.version)})
	}
	return rows
}

func (h machineReport) crewVersion() string {
	out, err := output(h.env, "go", "version", "-m", h.crew)
	if err != nil {
		return h.crew
	}
	rev, mod := "", ""
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "build" {
			if v, ok := strings.CutPrefix(f[1], "vcs.revision="); ok {
				rev = v
			}
			if v, ok := strings.CutPrefix(f[1], "vcs.modified="); ok {
				mod = v
			}
		}
	}
	s := "`" + h.crew + "`"
	if h.cfg.crewBin == "" {
		s = "production build (`make build`: static, no tags) of the working tree"
		if rev == "" && h.crewSrc != "" {
			// No VCS stamp in the binary: ask git, read-only.
			if out, err := output(h.env, "git", "-C", h.crewSrc, "rev-parse", "--short=12", "HEAD"); err == nil {
				s += " at HEAD " + strings.TrimSpace(out)
			}
		}
	}
	if rev != "" {
		s += ", commit " + rev[:min(12, len(rev))]
		if mod == "true" {
			s += " + uncommitted changes"
		}
	}
	return s
}

// firstMatch returns the value of the first "key : value" line of a
// /proc file, or "".
func firstMatch(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// filesystemOf describes dir's filesystem with df -T and stat -f, and
// returns its device and mount point.
func filesystemOf(env []string, dir string) (desc, dev, mnt string) {
	var parts []string
	if out, err := output(env, "df", "-T", dir); err == nil {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if f := strings.Fields(lines[len(lines)-1]); len(f) >= 7 {
			dev, mnt = f[0], f[6]
			parts = append(parts, fmt.Sprintf("`df -T`: %s on %s, type %s", dev, mnt, f[1]))
		}
	}
	if out, err := output(env, "stat", "-f", "-c", "%T, block size %S", dir); err == nil {
		parts = append(parts, "`stat -f`: "+strings.TrimSpace(out))
	}
	if len(parts) == 0 {
		return "unknown", "", ""
	}
	return strings.Join(parts, "; "), dev, mnt
}

func mountOptions(mnt string) string {
	if mnt == "" {
		return ""
	}
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return ""
	}
	found := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] == mnt {
			found = f[2] + " " + f[3] // the last mount at that point wins
		}
	}
	return found
}

func blockDevice(dev string) string {
	name := strings.TrimPrefix(dev, "/dev/")
	if strings.Contains(name, "/") {
		return dev
	}
	q := "/sys/block/" + name + "/queue/"
	if _, err := os.Stat(q); err != nil {
		return dev
	}
	read := func(f string) string {
		b, _ := os.ReadFile(q + f)
		return strings.TrimSpace(string(b))
	}
	rot := map[string]string{"0": "non-rotational", "1": "rotational"}[read("rotational")]
	return fmt.Sprintf("%s: %s, write cache %q", dev, rot, read("write_cache"))
}

// ext4Journal says whether an ext4 filesystem has a journal, from
// /sys/fs/ext4/<dev>/journal_task ("<none>" without one); "" if unknown.
func ext4Journal(dev string) string {
	b, err := os.ReadFile("/sys/fs/ext4/" + strings.TrimPrefix(dev, "/dev/") + "/journal_task")
	if err != nil {
		return ""
	}
	switch t := strings.TrimSpace(string(b)); t {
	case "<none>", "":
		return "**none** (`journal_task` is `<none>`): fsync writes the inode and data in place, and creating a file scans past inodes deleted in the last minutes (ext4 `recently_deleted`, only done without a journal)"
	default:
		return "yes (jbd2 thread " + t + ")"
	}
}
