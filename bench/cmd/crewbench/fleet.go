package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The etcd store at scale (issue 26):
//
//   - the queue's handoffs: 120 `--wait` starts of 0.3 s at cap 3 on a
//     single-member etcd against the same on a state root (the same
//     binary, crew-etcd); goal: the etcd makespan within 1.3× of the
//     local one. Waiters used to wake in a herd (every delete under the
//     prefix told every waiter, each of which read the store).
//   - admission across hosts: 1, 3 and 10 simulated hosts (CREW_HOST),
//     each starting distinct tasks one after the other, against a
//     three-member cluster: admissions per second, and how long each
//     start held the admission lock, watched from etcd (the mutex's keys
//     under PREFIX/locks/dispatch-admission/: the key created first holds
//     it). If the lock were the limit, its busy share would near 100% and
//     admissions per second would stop growing with hosts. A crew whose
//     admission is optimistic (issue 26) takes no lock: no holds are seen.

const (
	fleetWaiters = 120
	fleetCap     = 3
	fleetSleepMS = 300
)

func (h fleetScenario) scenarioFleet() error {
	h.rep.heading(2, "The etcd store at scale (issue 26)")
	bin, dev, err := h.etcdBuilds()
	if err != nil {
		return err
	}
	wait, ok, why := queueScenario{h.harness}.waitFlag()
	if !ok {
		return fmt.Errorf("no --wait: %s", why)
	}
	one, err := h.devEtcd(dev, 1)
	if err != nil {
		return err
	}
	if err := h.fleetQueue(bin, wait, one); err != nil {
		return err
	}
	three, err := h.devEtcd(dev, 3)
	if err != nil {
		return err
	}
	return h.fleetAdmissions(bin, three)
}

// fleetQueue: the herd figure, local and etcd bursts alternating.
func (h fleetScenario) fleetQueue(bin, wait, endpoint string) error {
	reps := h.cfg.n(2, 1)
	root := h.path("roots", "fleet-queue")
	store := "etcd://" + endpoint + "/crewbench-queue"
	stores := []struct{ name, flag, where string }{
		{"state root (work directory's disk)", "--root", root},
		{"etcd, one member (data on the same disk)", "--store", store},
	}
	for _, s := range stores {
		if _, err := output(h.env, bin, s.flag, s.where, "init", "--max", fmt.Sprint(fleetCap)); err != nil {
			return err
		}
	}
	spans := make([][]time.Duration, len(stores))
	var rows [][]string
	for rep := range reps {
		for si, s := range stores {
			h.progress("fleet: %d --wait starts on the %s, burst %d", fleetWaiters, s.name, rep+1)
			dir := h.path("fleet", fmt.Sprintf("queue-%d-%d", si, rep))
			obs := dir + "/observer"
			res, err := h.burst(dir, h.env, fleetWaiters, obs, func(i int) []string {
				return []string{bin, s.flag, s.where, "start", wait, fmt.Sprintf("f-%d-%d", rep, i), "--", h.self, "observe", obs, fmt.Sprint(fleetSleepMS)}
			})
			if err != nil {
				return fmt.Errorf("fleet queue on the %s: %w", s.name, err)
			}
			if res.codes[0] != fleetWaiters {
				return fmt.Errorf("fleet queue on the %s: exit codes %v, expected %d × 0", s.name, res.codes, fleetWaiters)
			}
			if worst := maxConcurrency(res.observed); worst > fleetCap {
				return fmt.Errorf("fleet queue on the %s: %d commands ran at once at cap %d", s.name, worst, fleetCap)
			}
			spans[si] = append(spans[si], res.makespan)
			gaps := handoffs(res.observed)
			rows = append(rows, []string{s.name, fmt.Sprint(rep + 1), ms(res.makespan),
				fmt.Sprintf("%.2f", ratio(res.makespan, fleetIdeal())), ms(percentile(gaps, 50)) + " / " + ms(percentile(gaps, 90))})
		}
	}
	h.rep.table([]string{"store", "burst", "makespan", "÷ ideal", "handoff p50 / p90"}, rows)
	local, etcd := percentile(spans[0], 50), percentile(spans[1], 50)
	x := ratio(etcd, local)
	h.rep.para(fmt.Sprintf("%d × `crew-etcd start %s f-I -- observe %dms` at cap %d, released together (ideal %s), bursts alternating "+
		"between the stores. Medians: state root %s, etcd %s: **%.2f×** (goal ≤ 1.3×). A handoff is a command's end to "+
		"the next command's start in its slot.", fleetWaiters, wait, fleetSleepMS, fleetCap, ms(fleetIdeal()), ms(local), ms(etcd), x))
	h.target(fmt.Sprintf("etcd queue: %d `--wait` starts of %d ms at cap %d, makespan on etcd ÷ on a state root", fleetWaiters, fleetSleepMS, fleetCap),
		fmt.Sprintf("%s ÷ %s = %.2f×", ms(etcd), ms(local), x), "≤ 1.3×", x <= 1.3)
	return nil
}

func fleetIdeal() time.Duration {
	return time.Duration(fleetWaiters/fleetCap*fleetSleepMS) * time.Millisecond
}

// fleetAdmissions: admissions per second from 1, 3 and 10 hosts.
func (h fleetScenario) fleetAdmissions(bin, endpoints string) error {
	prefix := "crewbench-admit"
	store := "etcd://" + endpoints + "/" + prefix
	if _, err := output(h.env, bin, "--store", store, "init", "--max", "64"); err != nil {
		return err
	}
	holds, err := watchHolds(strings.Split(endpoints, ","), "/"+prefix+"/locks/dispatch-admission/")
	if err != nil {
		return err
	}
	defer holds.stop()
	per := h.cfg.n(30, 8)
	var rows [][]string
	sawHolds := false
	for _, hosts := range []int{1, 3, 10} {
		h.progress("fleet: %d host(s) × %d starts of distinct tasks", hosts, per)
		holds.reset()
		begin := time.Now()
		lat, err := h.hostsRacing(bin, store, hosts, per)
		elapsed := time.Since(begin)
		if err != nil {
			return err
		}
		held, busy, err := holds.take()
		if err != nil {
			return err
		}
		n := hosts * per
		sawHolds = sawHolds || len(held) > 0
		rows = append(rows, []string{fmt.Sprint(hosts), fmt.Sprint(n), ms(elapsed), fmt.Sprintf("%.1f", float64(n)/elapsed.Seconds()),
			ms(percentile(lat, 50)), ms(percentile(held, 50)) + " / " + ms(percentile(held, 90)), fmt.Sprint(len(held)),
			fmt.Sprintf("%.0f%%", 100*busy.Seconds()/elapsed.Seconds())})
	}
	h.rep.table([]string{"hosts", "starts", "elapsed", "admissions/s", "start p50 (one host's `crew start t -- true`)",
		"admission lock held p50 / p90", "holds seen", "lock busy ÷ elapsed"}, rows)
	h.rep.para(fmt.Sprintf("Each simulated host (CREW_HOST=hN) runs `crew-etcd --store etcd://3 MEMBERS/%s start a-H-I -- true` "+
		"%d times, one after the other, all hosts at once; tasks are distinct and the cap (64) never binds, so every start "+
		"is admitted. The hold times are watched from etcd: the admission mutex's keys, each held from the moment it is the "+
		"oldest key to its deletion (what the watch saw, so a round trip of etcd's is in each). The busy share is the sum of "+
		"the holds over the elapsed time: near 100%% would mean the lock, not the hosts, limits admissions.", prefix, per))
	if !sawHolds {
		h.rep.para("No key appeared under locks/dispatch-admission/: this crew takes no admission lock on etcd (its admission " +
			"is optimistic: one fenced transaction per try, issue 26), so there is no hold to time.")
	}
	return nil
}

// hostsRacing runs per starts on each of hosts simulated hosts at once,
// and returns every start's duration.
func (h fleetScenario) hostsRacing(bin, store string, hosts, per int) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for host := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := withEnv(h.env, fmt.Sprintf("CREW_HOST=h%d", host))
			for i := range per {
				begin := time.Now()
				cmd := exec.Command(bin, "--store", store, "start", fmt.Sprintf("a-%d-%d-%d", hosts, host, i), "--", "true")
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				d := time.Since(begin)
				mu.Lock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("host h%d: crew start: %v: %s", host, err, out)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, firstErr
}

// holdWatch follows the admission mutex's keys and times each hold.
type holdWatch struct {
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	holds []time.Duration
	rev   int64 // the revision the watch has delivered up to
}

// watchHolds watches the keys under pfx from now on.
func watchHolds(endpoints []string, pfx string) (*holdWatch, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &holdWatch{cli: cli, cancel: cancel, done: make(chan struct{})}
	wch := cli.Watch(ctx, pfx, clientv3.WithPrefix())
	go w.follow(wch)
	return w, nil
}

// follow keeps the mutex's line as etcd orders it (creation revision, so
// the order of the events): the first key holds the lock from the moment
// it became first until its deletion.
func (w *holdWatch) follow(wch clientv3.WatchChan) {
	defer close(w.done)
	var line []string
	var since time.Time
	for resp := range wch {
		now := time.Now()
		w.mu.Lock()
		w.rev = max(w.rev, resp.Header.Revision)
		w.mu.Unlock()
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			switch {
			case ev.Type == clientv3.EventTypePut && ev.IsCreate():
				if line = append(line, key); len(line) == 1 {
					since = now
				}
			case ev.Type == clientv3.EventTypeDelete:
				i := slices.Index(line, key)
				if i < 0 {
					continue // created before the watch
				}
				if line = slices.Delete(line, i, i+1); i == 0 {
					w.mu.Lock()
					w.holds = append(w.holds, now.Sub(since))
					w.mu.Unlock()
					since = now
				}
			}
		}
	}
}

func (w *holdWatch) reset() {
	w.mu.Lock()
	w.holds = nil
	w.mu.Unlock()
}

// take returns the holds seen since reset, and their sum, once the watch
// has delivered every change made before it was called.
func (w *holdWatch) take() ([]time.Duration, time.Duration, error) {
	if err := w.catchUp(); err != nil {
		return nil, 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum time.Duration
	for _, d := range w.holds {
		sum += d
	}
	return slices.Clone(w.holds), sum, nil
}

// catchUp waits until the watch has delivered the store's current
// revision, asking etcd for progress notifications meanwhile.
func (w *holdWatch) catchUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := w.cli.Get(ctx, "/")
	if err != nil {
		return err
	}
	for {
		w.mu.Lock()
		rev := w.rev
		w.mu.Unlock()
		if rev >= resp.Header.Revision {
			return nil
		}
		if err := w.cli.RequestProgress(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the watch of the admission lock did not catch up: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (w *holdWatch) stop() {
	w.cancel()
	<-w.done
	w.cli.Close()
}
