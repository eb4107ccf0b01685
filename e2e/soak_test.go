package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSoak runs the bounded stress tests round after round for a
// wall-clock duration: starts refused at a full cap
// (TestStressNeverOverAdmits), the waiting queue
// (TestQueueNeverOverAdmits), and kills with recovers beside them
// (TestChaosStartsKillsAndRecovers, a fresh seed each round, logged; or
// CREW_CHAOS_SEED's every round). It stops at the first failing round.
//
// It runs only when asked, with CREW_SOAK=1, for CREW_SOAK_DURATION (a Go
// duration; default 10m): `make soak` (SOAKTIME=1h make soak). Every pass
// of `make test` runs each of those tests once.
func TestSoak(t *testing.T) {
	if os.Getenv("CREW_SOAK") != "1" {
		t.Skip("a soak test: runs with CREW_SOAK=1 (make soak)")
	}
	duration := 10 * time.Minute
	if s := os.Getenv("CREW_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "CREW_SOAK_DURATION")
		duration = d
	}
	rounds := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"stress", stressNeverOverAdmits},
		{"queue", queueNeverOverAdmits},
		{"chaos", func(t *testing.T) { chaos(t, chaosSeed(t)) }},
	}
	deadline := time.Now().Add(duration)
	n := 0
	for time.Now().Before(deadline) {
		r := rounds[n%len(rounds)]
		n++
		if !t.Run(fmt.Sprintf("%d-%s", n, r.name), r.run) {
			break
		}
	}
	t.Logf("%d rounds in %s", n, duration)
}
