package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// peer is a tool users would pick instead of crew.
type peer struct {
	name    string
	bin     string // absolute path; empty when absent
	version string
	install string // the line that would install it (never run by the harness)
	note    string // why it is absent
}

var peerOrder = []string{"flock", "sem", "tsp", "nq"}

// What each peer command does, for the report. Every measured command is
// listed verbatim in the tables; these say what happens behind it.
var peerDoc = map[string]string{
	"crew":  "`crew --root R start t -- true`: takes the admission lock, reads the active set, creates and locks the run's two owner-lock files, writes the `provisioning` record durably (fsync file, rename, fsync directory), releases the lock, starts `true` in its own process group with the owner lock as fd 3, records `running` (fsync file, rename), waits, writes the final record durably into `runs/done/<hour>/` (fsync, rename, fsync directory), removes the active record and lock files.",
	"flock": "`flock FILE true`: open FILE, flock(LOCK_EX) (blocks while another holds it), fork/exec `true`, wait. A mutex (cap 1), no record of anything.",
	"sem":   "`sem --will-cite --fg -j 4 --id x true`: GNU parallel (Perl) as a counting semaphore: starts the Perl interpreter, takes one of 4 slots of the named semaphore `x` (lock files under `$PARALLEL_HOME`, polling with back-off while full), runs `true` in the foreground, releases the slot.",
	"tsp":   "`tsp -f -n true` against a private, already running task-spooler server (`TS_SOCKET` in the work directory, started with `tsp -S N`): connects to the server's Unix socket, enqueues the job, waits for the server to grant a slot, runs `true` itself (`-f`: in the foreground, `-n`: output not stored), reports the exit status to the server. The server process is not measured; its queue is in memory only.",
	"nq":    "`nq true` then `nq -w ID`: nq creates the job file `,<time>.<pid>` in `$NQDIR` and forks a detached nq process that locks it, waits (flock) for every earlier job file, runs `true` as its child and writes its exit status into the job file; the foreground process prints the job id and exits. `nq -w ID` blocks until the job's file lock is released. Both foreground processes are in the measured time; nq has no cap other than 1 (a strict serial queue).",
}

func findPeers(env []string) map[string]*peer {
	ps := map[string]*peer{
		"flock": {name: "flock", install: "apt-get install -y util-linux   # flock(1)"},
		"sem":   {name: "sem", install: "apt-get install -y parallel"},
		"tsp":   {name: "tsp", install: "apt-get install -y task-spooler"},
		"nq":    {name: "nq", install: "apt-get install -y nq"},
	}
	look := func(p *peer, names ...string) string {
		for _, n := range names {
			if b, err := exec.LookPath(n); err == nil {
				if abs, err := filepath.Abs(b); err == nil {
					return abs
				}
				return b
			}
		}
		p.note = "no " + strings.Join(names, " or ") + " on PATH"
		return ""
	}
	first := func(s string) string {
		s = strings.TrimSpace(s)
		s, _, _ = strings.Cut(s, "\n")
		return strings.TrimSpace(s)
	}

	if p := ps["flock"]; true {
		if p.bin = look(p, "flock"); p.bin != "" {
			out, _ := quickOutput(env, p.bin, "--version")
			p.version = first(out)
		}
	}
	if p := ps["sem"]; true {
		if p.bin = look(p, "sem"); p.bin != "" {
			out, _ := quickOutput(env, p.bin, "--version")
			if !strings.Contains(out, "GNU parallel") {
				p.bin, p.note = "", "the sem on PATH is not GNU parallel's"
			} else {
				p.version = first(out)
			}
		}
	}
	if p := ps["tsp"]; true {
		// Debian installs task-spooler as tsp, since moreutils owns ts;
		// elsewhere it is ts. Only a ts that says it is Task Spooler counts.
		for _, n := range []string{"tsp", "ts"} {
			b, err := exec.LookPath(n)
			if err != nil {
				continue
			}
			out, _ := quickOutput(withEnv(env, "TS_SOCKET=/nonexistent/crewbench-probe"), b, "-V")
			if strings.Contains(out, "Task Spooler") {
				p.bin, p.version = b, first(out)
				break
			}
		}
		if p.bin == "" {
			p.note = "no task-spooler as tsp or ts on PATH"
		}
	}
	if p := ps["nq"]; true {
		if p.bin = look(p, "nq"); p.bin != "" {
			p.version = "no version flag"
			if out, err := quickOutput(env, "dpkg-query", "-W", "-f", "${Version}", "nq"); err == nil && strings.TrimSpace(out) != "" {
				p.version = "Debian package nq " + strings.TrimSpace(out)
			}
		}
	}
	return ps
}

// quickOutput runs a probe with a time limit and returns stdout and stderr
// together.
func quickOutput(env []string, args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	var b strings.Builder
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return b.String(), err
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return b.String(), fmt.Errorf("%s timed out", strings.Join(args, " "))
	}
}

// tspServer starts a private task-spooler server with the given number of
// slots and returns the environment that talks to it. The server is
// stopped (tsp -K) at clean-up, whatever happens.
func (h *harness) tspServer(label string, slots int) ([]string, func(), error) {
	p := h.peers["tsp"]
	sock := h.path("tmp", "ts-"+label+".sock")
	env := withEnv(h.env, "TS_SOCKET="+sock, "TS_MAXFINISHED=1000")
	stop := func() {
		if _, err := os.Stat(sock); err == nil {
			_, _ = quickOutput(env, p.bin, "-K")
		}
	}
	h.atCleanup(stop)
	// The first client call starts the server; -S sets its slots.
	if out, err := quickOutput(env, p.bin, "-S", fmt.Sprint(slots)); err != nil {
		stop()
		return nil, nil, fmt.Errorf("start task-spooler server: %v: %s", err, out)
	}
	return env, stop, nil
}
