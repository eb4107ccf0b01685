package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chaosSeedEnv names the environment variable that replays a chaos
// schedule: every chaos run logs its seed, and
//
//	CREW_CHAOS_SEED=<seed> go test -race -count=1 -v -run TestChaos ./e2e/
//
// runs the same schedule of delays and kills again. (The interleaving of
// the processes themselves still varies from run to run.)
const chaosSeedEnv = "CREW_CHAOS_SEED"

// chaosSeed is the seed of a chaos schedule: CREW_CHAOS_SEED if set, else
// a new one from the clock.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv(chaosSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q is not a seed (an unsigned 64-bit integer)", chaosSeedEnv, s)
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// TestChaosStartsKillsAndRecovers runs waiting starts, SIGKILLs of
// supervisors and commands at random moments, and crew recover in a loop,
// all at once. Throughout, the commands' own observer never sees more than
// the cap; afterwards one recover converges everything: no active record,
// no lock left, every record whole, and a second recover finds nothing.
func TestChaosStartsKillsAndRecovers(t *testing.T) {
	chaos(t, chaosSeed(t))
}

func chaos(t *testing.T, seed uint64) {
	t.Logf("chaos seed %d (replay with %s=%d)", seed, chaosSeedEnv, seed)
	e := newEnv(t)
	e.initMax(3)
	obs := filepath.Join(e.dir, "observer")
	const n = 40
	rng := rand.New(rand.NewPCG(1, seed))
	delays := make([]time.Duration, n)
	// 0: let it finish; 1: SIGKILL the crew process (waiting, admitting or
	// supervising). Commands are never killed here: the observer needs
	// every started command's end line (other tests kill whole groups).
	kill := make([]int, n)
	for i := range n {
		delays[i] = time.Duration(rng.IntN(300)) * time.Millisecond
		kill[i] = rng.IntN(2)
	}

	stop := make(chan struct{})
	var recovers sync.WaitGroup
	var recovered atomic.Int64 // recovers that finished
	for range 2 {
		recovers.Add(1)
		go func() {
			defer recovers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// assert, not require: this is not the test's goroutine.
				r, err := e.tryRun("recover", "--json")
				if assert.NoError(t, err) {
					assert.Equal(t, 0, r.Code, "recover during chaos: %s\n%s", r.Stderr, r.Stdout)
					recovered.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}

	// Each goroutine reports here; the test asserts after wg.Wait().
	errs := make([]error, n)
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.tryStart(nil, append([]string{"start", "--wait", fmt.Sprintf("c%d", i), "--"}, observerCmd(obs, "0.1")...)...)
			if err != nil {
				errs[i] = err
				return
			}
			if kill[i] == 0 {
				results[i], errs[i] = p.tryWait(60 * time.Second)
				return
			}
			time.Sleep(delays[i])
			// Through os.Process, not the bare pid: if crew has already
			// exited and been reaped, its pid may be anyone's by now.
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			results[i], errs[i] = p.tryWait(10 * time.Second)
		}()
	}
	wg.Wait()
	recoveredDuringStarts := recovered.Load()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// The chaos happened: kills landed on living crew processes, and the
	// others ran to the end while recovers ran beside them.
	landed := 0
	for i, r := range results {
		if kill[i] == 0 {
			assert.Equal(t, 0, r.Code, "c%d was not killed, so it waited, ran and succeeded: %s", i, r.Stderr)
		} else if r.Code == 128+int(syscall.SIGKILL) {
			landed++
		}
	}
	t.Logf("%d SIGKILLs landed on a living crew; %d recovers finished while the starts ran", landed, recoveredDuringStarts)
	assert.Positive(t, landed, "no SIGKILL reached a living crew process: nothing was killed")
	assert.Positive(t, recoveredDuringStarts, "no recover finished while the starts ran")
	// Orphaned commands (supervisor killed, command alive) finish in 0.1 s.
	eventually(t, 20*time.Second, "every command to end", func() bool { return e.status().SlotsInUse == 0 })
	close(stop)
	recovers.Wait()

	maxSeen, started := maxConcurrency(t, obs)
	t.Logf("%d commands started, at most %d at once", started, maxSeen)
	assert.Positive(t, started, "no command started: the observer proves nothing")
	assert.LessOrEqual(t, maxSeen, 3, "over-admission during chaos")

	r := e.run("recover")
	require.Equal(t, 0, r.Code, r.Stderr)
	again, _ := e.recover()
	assert.Zero(t, again.changes(), "recover converged: %+v", again)
	active, done := runIDsOnDisk(t, e.root) // also checks every record is whole
	assert.Empty(t, active)
	assert.Empty(t, ownerFiles(t, e.root))
	seen := map[string]bool{}
	for _, id := range done {
		assert.False(t, seen[id], "run %s recorded twice", id)
		seen[id] = true
	}
	s := e.status()
	assert.Empty(t, e.queue().Queue)
	assert.Empty(t, s.Problems)
}
