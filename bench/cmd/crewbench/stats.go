package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// sample is one timed run of a contender: wall time from fork to reaped
// exit, and the CPU time (user + system) the kernel charged to the process
// and the children it waited for (-1 when not known).
type sample struct {
	wall, cpu time.Duration
}

// contender is one side of a comparison.
type contender struct {
	name string // short label: crew, flock, sem, ...
	what string // the exact command line, for the report
	run  func() (sample, error)
}

// series is what alternate measured for one contender.
type series struct {
	contender
	samples []sample
}

func (s *series) walls() []time.Duration {
	out := make([]time.Duration, len(s.samples))
	for i, x := range s.samples {
		out[i] = x.wall
	}
	return out
}

func (s *series) cpus() []time.Duration {
	var out []time.Duration
	for _, x := range s.samples {
		if x.cpu >= 0 {
			out = append(out, x.cpu)
		}
	}
	return out
}

func (s *series) median() time.Duration { return percentile(s.walls(), 50) }
func (s *series) p90() time.Duration    { return percentile(s.walls(), 90) }
func (s *series) cpuMedian() time.Duration {
	c := s.cpus()
	if len(c) == 0 {
		return -1
	}
	return percentile(c, 50)
}

// percentile is the nearest-rank percentile p (0 < p <= 100) of ds, or -1
// for no data. The median of an even count is the mean of the middle two.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if p == 50 {
		n := len(s)
		if n%2 == 1 {
			return s[n/2]
		}
		return (s[n/2-1] + s[n/2]) / 2
	}
	rank := int(p/100*float64(len(s)) + 0.999999)
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// pairedRatios are the per-round ratios a[i]/b[i]: each round runs the
// two back to back, so their median cancels slow phases of a shared
// machine, and their p10-p90 is the spread of the ratio.
func pairedRatios(a, b *series) []float64 {
	n := min(len(a.samples), len(b.samples))
	r := make([]float64, n)
	for i := range n {
		r[i] = float64(a.samples[i].wall) / float64(b.samples[i].wall)
	}
	return r
}

func pairedRatio(a, b *series) float64 { return medianFloat(pairedRatios(a, b)) }

// ratioSpread is the p10-p90 of the per-round ratios, for reports.
func ratioSpread(a, b *series) string {
	r := pairedRatios(a, b)
	return fmt.Sprintf("per-round ratio %.2f (p10–p90 %.2f–%.2f, %d rounds)", medianFloat(r), percentileFloat(r, 10), percentileFloat(r, 90), len(r))
}

// spread is the p10-p90 of a series' wall times.
func (s *series) spread() string {
	return ms(percentile(s.walls(), 10)) + "–" + ms(s.p90())
}

func medianFloat(xs []float64) float64 { return percentileFloat(xs, 50) }

// percentileFloat is percentile for floats: nearest rank, the median of an
// even count the mean of the middle two; 0 for no data.
func percentileFloat(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if p == 50 {
		n := len(s)
		if n%2 == 1 {
			return s[n/2]
		}
		return (s[n/2-1] + s[n/2]) / 2
	}
	rank := int(p/100*float64(len(s)) + 0.999999)
	return s[max(1, min(rank, len(s)))-1]
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// alternate runs every contender warm times (discarded), then n rounds in
// which each runs once, in order: A B A B ... (A B C A B C ... for three).
func (h *harness) alternate(label string, cs []contender, n, warm int) ([]*series, error) {
	out := make([]*series, len(cs))
	for i, c := range cs {
		out[i] = &series{contender: c}
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	h.progress("%s: %s, %d rounds alternating", label, strings.Join(names, " vs "), n)
	for range warm {
		for _, c := range cs {
			if _, err := c.run(); err != nil {
				return nil, fmt.Errorf("%s (warm-up): %w", c.name, err)
			}
		}
	}
	for range n {
		for i, c := range cs {
			s, err := c.run()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			out[i].samples = append(out[i].samples, s)
		}
	}
	return out, nil
}

// execRunner times one process: from just before fork to just after the
// kernel reaped it. Its streams are /dev/null except stderr, which goes to
// a file (no pipe, no goroutine) so a failure can be shown.
func (h *harness) execRunner(env []string, okCodes []int, args ...string) func() (sample, error) {
	errPath := h.path("stderr", fmt.Sprintf("%s-%d.txt", sanitize(args[0]), h.seq()))
	return func() (sample, error) {
		errFile, err := os.OpenFile(errPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return sample{}, err
		}
		defer errFile.Close()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		cmd.Stderr = errFile
		start := time.Now()
		err = cmd.Start()
		if err == nil {
			err = cmd.Wait()
		}
		wall := time.Since(start)
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return sample{}, err
		}
		ps := cmd.ProcessState
		if !slices.Contains(okCodes, ps.ExitCode()) {
			msg, _ := os.ReadFile(errPath)
			return sample{}, fmt.Errorf("%s: %s: %s", strings.Join(args, " "), ps, tail(msg, 600))
		}
		return sample{wall: wall, cpu: ps.UserTime() + ps.SystemTime()}, nil
	}
}

// output runs a command to completion and returns its stdout, failing with
// its stderr.
func output(env []string, args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, tail(stderr.Bytes(), 600))
	}
	return stdout.String(), nil
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

func sanitize(s string) string {
	s = s[strings.LastIndex(s, "/")+1:]
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}
