package e2e

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChaosStartsKillsAndRecovers runs waiting starts, SIGKILLs of
// supervisors and commands at random moments, and crew recover in a loop,
// all at once. Throughout, the commands' own observer never sees more than
// the cap; afterwards one recover converges everything: no active record,
// no lock left, every record whole, and a second recover finds nothing.
func TestChaosStartsKillsAndRecovers(t *testing.T) {
	e := newEnv(t)
	e.initMax(3)
	obs := filepath.Join(e.dir, "observer")
	const n = 40
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
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
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}

	// Each goroutine reports here; the test asserts after wg.Wait().
	errs := make([]error, n)
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
				_, errs[i] = p.tryWait(60 * time.Second)
				return
			}
			time.Sleep(delays[i])
			// Through os.Process, not the bare pid: if crew has already
			// exited and been reaped, its pid may be anyone's by now.
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			_, errs[i] = p.tryWait(10 * time.Second)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// Orphaned commands (supervisor killed, command alive) finish in 0.1 s.
	eventually(t, 20*time.Second, "every command to end", func() bool { return e.status().SlotsInUse == 0 })
	close(stop)
	recovers.Wait()

	maxSeen, started := maxConcurrency(t, obs)
	t.Logf("%d commands started, at most %d at once", started, maxSeen)
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
