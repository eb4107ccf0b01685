package main

import (
	"bufio"
	"cmp"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The etcd store (issue 13): what it costs, and that the local default does
// not pay for it. Three contenders in one alternation on a tmpfs state
// root: crew as `make build` makes it, crew as `make build-etcd` makes it
// (the same local start, with the etcd client linked in), and the etcd
// build starting a run on a single-member etcd on loopback (crew's
// development server, data on the work directory's disk).

const (
	etcdDefault = "crew (make build), tmpfs root"
	etcdLinked  = "crew-etcd (make build-etcd), tmpfs root"
	etcdStore   = "crew-etcd, etcd store"
)

func (h etcdScenario) scenarioEtcd() error {
	r := &h.rep
	r.heading(2, "The etcd store: its cost, and the local default's")
	bin, dev, err := h.etcdBuilds()
	if err != nil {
		return err
	}
	endpoint, err := h.devEtcd(dev, 1)
	if err != nil {
		return err
	}
	shm := h.tmpfs()
	if shm == "" {
		return fmt.Errorf("no tmpfs at /dev/shm")
	}
	rootA, rootB := filepath.Join(shm, "etcd-default"), filepath.Join(shm, "etcd-linked")
	if err := h.initRoot(rootA, 4); err != nil {
		return err
	}
	if err := h.initRoot(rootB, 4); err != nil {
		return err
	}
	store := "etcd://" + endpoint + "/crewbench"
	if _, err := output(h.env, bin, "--store", store, "init", "--max", "4"); err != nil {
		return err
	}
	ok := []int{0}
	cs := []contender{
		{name: etcdDefault, what: "crew --root TMPFS/A start t -- true", run: h.execRunner(h.env, ok, h.crew, "--root", rootA, "start", "t", "--", "true")},
		{name: etcdLinked, what: "crew-etcd --root TMPFS/B start t -- true", run: h.execRunner(h.env, ok, bin, "--root", rootB, "start", "t", "--", "true")},
		{name: etcdStore, what: "crew-etcd --store etcd://127.0.0.1:PORT/crewbench start t -- true", run: h.execRunner(h.env, ok, bin, "--store", store, "start", "t", "--", "true")},
	}
	all, err := h.alternate("etcd", cs, h.cfg.n(100, 20), 3)
	if err != nil {
		return err
	}
	var rows [][]string
	for _, s := range all {
		rows = append(rows, []string{s.name, "`" + s.what + "`", fmt.Sprint(len(s.samples)), ms(s.median()), s.spread(), ms(s.cpuMedian())})
	}
	r.table([]string{"contender", "command", "runs", "median", "p10–p90", "CPU median"}, rows)
	a, b, c := all[0], all[1], all[2]
	size := func(p string) string {
		fi, err := os.Stat(p)
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%.1f MB", float64(fi.Size())/1e6)
	}
	r.table([]string{"ratio", "of medians", "per round"}, [][]string{
		{"etcd build ÷ default build, same local start", fmt.Sprintf("%.2f×", ratio(b.median(), a.median())), ratioSpread(b, a)},
		{"start on the etcd store ÷ default build's local start", fmt.Sprintf("%.2f×", ratio(c.median(), a.median())), ratioSpread(c, a)},
	})
	r.para(fmt.Sprintf("Binary sizes: `make build` %s, `make build-etcd` %s. The first ratio is what every local start "+
		"would pay if the etcd client were linked into the default binary (package init of gRPC, protobuf and the "+
		"client, and a larger binary to map); the default is built without it. The etcd store's start adds a lease "+
		"grant, the admission mutex, one read and one reservation transaction, the lease guard's process start, and "+
		"the running and final records: each a round trip that etcd commits to its disk before it answers.",
		size(h.crew), size(bin)))
	return nil
}

// etcdBuilds builds crew with the etcd store (make build-etcd) and crew's
// development etcd, once per harness run.
func (h *harness) etcdBuilds() (bin, dev string, err error) {
	h.etcdOnce.Do(func() {
		bin, dev = h.path("crew-etcd"), h.path("crew-etcd-dev")
		if err = (etcdScenario{h}).makeIn("build-etcd", "ETCD_BIN="+bin); err != nil {
			return
		}
		build := exec.Command("go", "build", "-tags", "etcd", "-o", dev, "./cmd/crew-etcd-dev")
		build.Dir, build.Stdout, build.Stderr = h.crewSrc, os.Stderr, os.Stderr
		if err = build.Run(); err != nil {
			err = fmt.Errorf("build crew-etcd-dev: %w", err)
			return
		}
		h.etcdBins = [2]string{bin, dev}
	})
	if h.etcdBins[0] == "" {
		return "", "", cmp.Or(err, fmt.Errorf("the etcd builds failed earlier"))
	}
	return h.etcdBins[0], h.etcdBins[1], nil
}

// freePorts are n distinct loopback addresses that were free a moment ago
// (held open together until all are chosen, so no two are the same).
func freePorts(n int) ([]string, error) {
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// makeIn runs a make target of crew's source tree.
func (h etcdScenario) makeIn(target string, vars ...string) error {
	cmd := exec.Command("make", append([]string{target}, vars...)...)
	cmd.Dir = h.crewSrc
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("make %s: %w", target, err)
	}
	return nil
}

// devEtcd starts crew's development etcd with members members on free
// loopback ports, data in the work directory, until the harness cleans up;
// it returns the client endpoints, comma-separated.
func (h *harness) devEtcd(bin string, members int) (string, error) {
	ports, err := freePorts(2 * members)
	if err != nil {
		return "", err
	}
	clients, peers := strings.Join(ports[:members], ","), strings.Join(ports[members:], ",")
	cmd := exec.Command(bin, "-listen", clients, "-peer", peers, "-data", h.path(fmt.Sprintf("etcd-data-%d", h.seq())))
	cmd.Env = h.env
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start crew-etcd-dev: %w", err)
	}
	h.atCleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // our own child
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "etcd serving") {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			return "", fmt.Errorf("crew-etcd-dev exited before serving")
		}
	case <-time.After(time.Minute):
		return "", fmt.Errorf("crew-etcd-dev not serving after a minute")
	}
	return clients, nil
}
