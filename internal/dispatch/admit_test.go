package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/helperproc"
	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// With a cap of N, N reservations are admitted and the next one is refused
// with SlotsBusy, naming the count, the cap and the holders.
func TestAdmitNeverOverAdmits(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("cap %d", n), func(t *testing.T) {
			d := newDispatcher(t)
			setCap(t, d, n)
			held := map[record.RunID]string{}
			for i := range n {
				task := fmt.Sprintf("task-%d", i)
				res := admit(t, d, task)
				assert.Equal(t, i, res.Rec.SlotsInUse, "slots in use seen by admission %d", i)
				assert.Equal(t, n, res.Rec.MaximumInProgress)
				assert.False(t, res.Rec.Forced)
				held[res.Rec.RunID] = task
			}

			res, err := d.Admit(context.Background(), admitReq("one-too-many"))
			require.Error(t, err)
			assert.Nil(t, res)
			var refused *vocab.RefusedError
			require.ErrorAs(t, err, &refused)
			assert.Equal(t, vocab.SlotsBusy, refused.Kind)
			assert.Equal(t, "one-too-many", refused.Task)
			assert.Equal(t, n, refused.InUse)
			assert.Equal(t, n, refused.Maximum)
			require.Len(t, refused.Holders, n)
			for _, h := range refused.Holders {
				assert.Equal(t, held[h.RunID], h.Task)
				assert.Equal(t, record.Provisioning, h.State)
				assert.Equal(t, os.Getpid(), h.PID)
			}
			assert.Contains(t, err.Error(), fmt.Sprintf("all slots are busy (%d/%d in use)", n, n))
			assert.Len(t, activeNames(t, d), n, "a refusal records nothing")
		})
	}
}

// Admissions racing in one process (each Admit opens its own admission lock
// file description, so they exclude each other as processes do) never
// admit more than the cap.
func TestAdmitConcurrentNeverOverAdmits(t *testing.T) {
	const maxSlots, callers = 3, 24
	d := newDispatcher(t)
	setCap(t, d, maxSlots)

	// Hold the admission lock while the callers line up behind it, so
	// that they contend for it when it is released.
	lock, err := runstore.New(d.Logs.Root()).LockAdmission(context.Background(), time.Second)
	require.NoError(t, err)

	var (
		wg       sync.WaitGroup
		ready    sync.WaitGroup
		mu       sync.Mutex
		admitted []*dispatch.Reservation
		refused  int
		other    []error
	)
	for i := range callers {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			res, err := d.Admit(context.Background(), admitReq(fmt.Sprintf("racer-%d", i)))
			mu.Lock()
			defer mu.Unlock()
			var r *vocab.RefusedError
			switch {
			case err == nil:
				admitted = append(admitted, res)
			case errors.As(err, &r) && r.Kind == vocab.SlotsBusy:
				refused++
			default:
				other = append(other, err)
			}
		}()
	}
	ready.Wait()
	// Every caller is blocked on the admission lock before it goes.
	helperproc.BlockedOnN(t, filepath.Join(d.Logs.Root(), ".locks", "dispatch-admission.lock"), os.Getpid(), callers)
	lock.Release()
	wg.Wait()
	t.Cleanup(func() {
		for _, res := range admitted {
			releaseAll(res)
		}
	})

	assert.Empty(t, other)
	assert.Len(t, admitted, maxSlots, "exactly the cap is admitted")
	assert.Equal(t, callers-maxSlots, refused)
	assert.Len(t, activeNames(t, d), maxSlots)
}

func TestAdmitRefusesSecondRunOfTheSameTask(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 4)
	first := admit(t, d, "deploy:prod")

	for _, force := range []bool{false, true} {
		req := admitReq("deploy:prod")
		req.Force = force
		res, err := d.Admit(context.Background(), req)
		assert.Nil(t, res)
		var refused *vocab.RefusedError
		require.ErrorAs(t, err, &refused, "force=%v", force)
		assert.Equal(t, vocab.TaskActive, refused.Kind, "--force never admits a second run of a task")
		require.Len(t, refused.Holders, 1)
		assert.Equal(t, first.Rec.RunID, refused.Holders[0].RunID)
		assert.Equal(t, 1, refused.InUse)
		assert.Contains(t, err.Error(), `task "deploy:prod" is already running as `+string(first.Rec.RunID))
	}
	assert.Len(t, activeNames(t, d), 1)
}

// Task names are data: names that a lossy slug would merge are different
// tasks.
func TestAdmitTaskNamesAreDistinct(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 10)
	for _, task := range []string{"dispatch:admission", "dispatch-admission", "Deploy Prod", "deploy prod", "PR-12/tests", "PR-12_tests", "../../etc/passwd"} {
		res := admit(t, d, task)
		assert.Equal(t, task, res.Rec.Task)
	}
	assert.Len(t, activeNames(t, d), 7)
}

func TestAdmitForcePastTheCap(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)

	// With a free slot, --force is not needed and not recorded.
	req := admitReq("a")
	req.Force = true
	first, err := d.Admit(context.Background(), req)
	require.NoError(t, err)
	t.Cleanup(func() { releaseAll(first) })
	assert.False(t, first.Rec.Forced)

	req = admitReq("b")
	req.Force = true
	res, err := d.Admit(context.Background(), req)
	require.NoError(t, err)
	t.Cleanup(func() { releaseAll(res) })
	assert.True(t, res.Rec.Forced)
	assert.Equal(t, 1, res.Rec.SlotsInUse)
	assert.Contains(t, res.Rec.Reason, "--force")

	onDisk, err := readRecordAt(lay(d).active(res.Rec.RunID))
	require.NoError(t, err)
	assert.True(t, onDisk.Forced, "the forced admission is recorded")

	// Both count: a third, unforced, run sees 2/1.
	_, err = d.Admit(context.Background(), admitReq("c"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	assert.Equal(t, 2, refused.InUse)
	assert.Equal(t, 1, refused.Maximum)
}

// A slot whose owner and supervisor locks are gone is free at the next
// admission, and that admission finalizes the dead run as interrupted.
func TestAdmitSelfHealsDeadRuns(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	dead := admit(t, d, "nightly")
	id := dead.Rec.RunID

	_, err := d.Admit(context.Background(), admitReq("other"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused, "the slot is held while the owner lives")

	releaseAll(dead) // every process of the run is gone

	// The same task: the dead run is neither a busy slot nor an active run
	// of the task.
	next := admit(t, d, "nightly")
	assert.NotEqual(t, id, next.Rec.RunID)
	assert.Equal(t, 0, next.Rec.SlotsInUse)

	rec, err := d.Logs.ReadRun(id)
	require.NoError(t, err)
	assert.Equal(t, record.Interrupted, rec.State)
	assert.Nil(t, rec.ExitCode, "exit status unknown")
	require.NotNil(t, rec.FinishedAt)
	assert.Contains(t, rec.Reason, fmt.Sprintf("owner process %d", os.Getpid()))
	assert.Contains(t, rec.Reason, "exited without finalizing the run")
	assert.Contains(t, rec.Reason, "never started")
	assert.Contains(t, rec.Reason, "exit status unknown")
	assert.True(t, exists(lay(d).done(id)), "the final record is in runs/done")
	assert.False(t, exists(lay(d).active(id)), "and out of the active set")
	assert.False(t, exists(lay(d).ownerLock(id)), "its owner lock file is removed")
	assert.False(t, exists(lay(d).supervisorLock(id)), "its supervisor lock file is removed")
	assert.Equal(t, []string{string(next.Rec.RunID) + ".run"}, activeNames(t, d))
}

// An orphan (supervisor gone, owner lock still held by the command) keeps
// its slot.
func TestAdmitCountsOrphans(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	orphan := admit(t, d, "orphan")
	orphanize(t, d, orphan)

	_, err := d.Admit(context.Background(), admitReq("other"))
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	assert.True(t, exists(lay(d).active(orphan.Rec.RunID)))
}

// An active file whose finished record exists (a crash between the two
// steps of finalization) holds no slot.
func TestAdmitIgnoresFinalizedLeftovers(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	res := admit(t, d, "a")
	rec := *res.Rec
	now := time.Now().UTC()
	code := 0
	rec.State, rec.FinishedAt, rec.ExitCode = record.Succeeded, &now, &code
	writeRecordFile(t, lay(d).done(rec.RunID), &rec)
	releaseAll(res)
	require.True(t, exists(lay(d).active(rec.RunID)))

	admit(t, d, "b")
	assert.False(t, exists(lay(d).active(rec.RunID)), "the leftover active file was removed")
	done := readDone(t, d, rec.RunID)
	assert.Equal(t, record.Succeeded, done.State, "the finished record is not rewritten")
}

func TestAdmitBadInputCreatesNothing(t *testing.T) {
	cases := map[string]vocab.AdmitRequest{
		"empty task":        {Task: "", Command: []string{"true"}},
		"control character": {Task: "bad\nname", Command: []string{"true"}},
		"too long":          {Task: strings.Repeat("x", record.MaxTaskBytes+1), Command: []string{"true"}},
		"invalid utf-8":     {Task: "bad\xffname", Command: []string{"true"}},
		"no command":        {Task: "ok", Command: nil},
		"empty command":     {Task: "ok", Command: []string{}},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			d := newDispatcher(t)
			req.LockTimeout = time.Second
			res, err := d.Admit(context.Background(), req)
			assert.Nil(t, res)
			var usage *vocab.UsageError
			require.ErrorAs(t, err, &usage)
			assert.NotEmpty(t, usage.Error())
			assert.NoDirExists(t, d.Logs.Root(), "a usage error creates nothing")
		})
	}
}

// An unreadable record whose owner lock is free holds no slot; admission
// steps around it and says so.
func TestAdmitCorruptRecordWithFreeOwner(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	_, path := writeCorruptActive(t, d, "{not json")
	foreign := lay(d).activeDir() + "/notes.txt"
	require.NoError(t, os.WriteFile(foreign, []byte("hello"), 0o600))

	res := admit(t, d, "a")
	assert.Equal(t, 0, res.Rec.SlotsInUse)
	require.Len(t, res.Warnings, 2)
	joined := errors.Join(res.Warnings...).Error()
	assert.Contains(t, joined, path)
	assert.Contains(t, joined, "holds no slot")
	assert.Contains(t, joined, foreign)
	assert.FileExists(t, path, "admission does not delete what it cannot read")
	assert.FileExists(t, foreign)
}

// An unreadable record whose owner lock is held counts as holding a slot
// (fail closed), and the refusal says why.
func TestAdmitCorruptRecordWithLiveOwnerFailsClosed(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 1)
	id, path := writeCorruptActive(t, d, "")
	holdOwner(t, lay(d).ownerLock(id))

	res, err := d.Admit(context.Background(), admitReq("a"))
	assert.Nil(t, res)
	var refused *vocab.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, vocab.SlotsBusy, refused.Kind)
	assert.Equal(t, 1, refused.InUse)
	require.Len(t, refused.Holders, 1)
	assert.Equal(t, id, refused.Holders[0].RunID)
	require.Len(t, refused.Warnings, 1)
	assert.ErrorContains(t, refused.Warnings[0], path)
	assert.ErrorContains(t, refused.Warnings[0], "counted as holding a slot")

	// Raising the cap admits past it: the corrupt record is one slot.
	setCap(t, d, 2)
	res = admit(t, d, "a")
	assert.Equal(t, 1, res.Rec.SlotsInUse)
	assert.Len(t, res.Warnings, 1)
}

// The reservation is durable before Admit returns: the provisioning record
// is on disk, complete, private, and its locks are held.
func TestAdmitProvisioningRecordIsOnDisk(t *testing.T) {
	d := newDispatcher(t)
	req := admitReq("build")
	req.Command = []string{"make", "-j2"}
	req.Dir = "/some/dir"
	res, err := d.Admit(context.Background(), req)
	require.NoError(t, err)
	t.Cleanup(func() { releaseAll(res) })
	id := res.Rec.RunID
	assert.True(t, record.LooksLikeRunID(string(id)))

	path := lay(d).active(id)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	rec, err := readRecordAt(path)
	require.NoError(t, err)
	assert.Equal(t, record.Provisioning, rec.State)
	assert.Equal(t, id, rec.RunID)
	assert.Equal(t, "build", rec.Task)
	assert.Equal(t, []string{"make", "-j2"}, rec.Command)
	assert.Equal(t, "/some/dir", rec.Dir)
	assert.Equal(t, os.Getpid(), rec.SupervisorPID)
	assert.Equal(t, d.Host, rec.Host)
	assert.Equal(t, record.DefaultMaximumInProgress, rec.MaximumInProgress, "no crew.json: the default cap")
	assert.Nil(t, rec.ExitCode)
	assert.Nil(t, rec.FinishedAt)

	for _, p := range []string{lay(d).ownerLock(id), lay(d).supervisorLock(id)} {
		assert.True(t, probeAt(t, p), "%s is held", p)
	}
	assert.Equal(t, id, res.Run.ID())
	assert.True(t, sameFile(t, res.Run.(*runstore.RunLocks).OwnerFile(), lay(d).ownerLock(id)), "the owner lock descriptor is the owner lock file")
	assert.True(t, sameFile(t, res.Run.(*runstore.RunLocks).SupervisorFile(), lay(d).supervisorLock(id)), "the supervisor lock descriptor is the supervisor lock file")
	assert.Empty(t, res.Warnings)

	// Nothing but the record: no temporary files left in the active set.
	assert.Equal(t, []string{string(id) + ".run"}, activeNames(t, d))
}

// A busy admission lock is waited for, and the timeout names the holder.
func TestAdmitLockTimeoutNamesTheHolder(t *testing.T) {
	d := newDispatcher(t)
	require.NoError(t, d.Logs.Ensure())
	lock, err := runstore.New(d.Logs.Root()).LockAdmission(context.Background(), time.Second)
	require.NoError(t, err)
	defer lock.Release()

	req := admitReq("a")
	req.LockTimeout = 50 * time.Millisecond
	start := time.Now()
	res, err := d.Admit(context.Background(), req)
	assert.Nil(t, res)
	var timeout *vocab.LockTimeoutError
	require.ErrorAs(t, err, &timeout)
	assert.Equal(t, os.Getpid(), timeout.Holder.PID)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Empty(t, activeNames(t, d))
}

func TestAdmitCorruptConfig(t *testing.T) {
	d := newDispatcher(t)
	require.NoError(t, d.Logs.Ensure())
	require.NoError(t, os.WriteFile(lay(d).config(), []byte(`{"version":1,"maximumInProgress":0}`), 0o600))
	res, err := d.Admit(context.Background(), admitReq("a"))
	assert.Nil(t, res)
	var cfgErr *vocab.ConfigError
	require.ErrorAs(t, err, &cfgErr)
	assert.Empty(t, activeNames(t, d))
	ents, err := os.ReadDir(lay(d).ownersDir())
	require.NoError(t, err)
	assert.Empty(t, ents, "no lock files left behind")
}

// Admission finalizes at most a few dead runs; the rest hold no slot either
// way and are left for the next admission or crew recover.
func TestAdmitBoundsReapingButNeverCountsTheDead(t *testing.T) {
	d := newDispatcher(t)
	setCap(t, d, 10)
	var dead []*dispatch.Reservation
	for i := range 6 {
		dead = append(dead, admit(t, d, fmt.Sprintf("dead-%d", i)))
	}
	for _, r := range dead {
		releaseAll(r)
	}
	setCap(t, d, 1)
	res := admit(t, d, "alive")
	assert.Equal(t, 0, res.Rec.SlotsInUse, "no dead run counts")
	left := len(activeNames(t, d)) - 1
	assert.Less(t, left, 6, "some dead runs were finalized")

	// Later admissions finish the job.
	releaseAll(res)
	for range 3 {
		releaseAll(admit(t, d, "again"))
	}
	for _, r := range dead {
		assert.Equal(t, record.Interrupted, readDone(t, d, r.Rec.RunID).State)
	}
}
