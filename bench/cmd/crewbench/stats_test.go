package main

import (
	"testing"
	"time"
)

func TestPercentileFloat(t *testing.T) {
	xs := []float64{0.5, 0.1, 0.4, 0.2, 0.3}
	for _, c := range []struct{ p, want float64 }{{50, 0.3}, {10, 0.1}, {90, 0.5}, {100, 0.5}} {
		if got := percentileFloat(xs, c.p); got != c.want {
			t.Errorf("p%.0f = %v, want %v", c.p, got, c.want)
		}
	}
	if got := medianFloat([]float64{1, 2, 3, 4}); got != 2.5 {
		t.Errorf("even median = %v, want 2.5", got)
	}
	if got := medianFloat(nil); got != 0 {
		t.Errorf("empty = %v, want 0", got)
	}
}

func TestPairedRatios(t *testing.T) {
	mk := func(walls ...time.Duration) *series {
		s := &series{}
		for _, w := range walls {
			s.samples = append(s.samples, sample{wall: w})
		}
		return s
	}
	a, b := mk(20, 30, 40), mk(10, 10, 10, 99)
	got := pairedRatios(a, b)
	if len(got) != 3 || got[0] != 2 || got[1] != 3 || got[2] != 4 {
		t.Fatalf("pairedRatios = %v, want [2 3 4] (rounds both ran)", got)
	}
	if r := pairedRatio(a, b); r != 3 {
		t.Fatalf("pairedRatio = %v, want 3", r)
	}
}
