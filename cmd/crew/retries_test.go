package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

// TestRetryAndTimeoutWords: how text shows a timed-out run, a run
// between attempts and a run that needed several attempts; JSON keeps
// the record's own state.
func TestRetryAndTimeoutWords(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 2, 11, 0, time.Local)
	end, code := now.Add(-time.Second), 1
	id := record.NewRunID(now.Add(-time.Minute))

	timedOut := record.Run{RunID: id, Task: "t", State: record.Failed, TimedOut: true}
	assert.Equal(t, "timed out", stateWord(timedOut))
	assert.Equal(t, "failed", stateWord(record.Run{State: record.Failed}))
	assert.Equal(t, "stopped", stateWord(record.Run{State: record.Stopped, TimedOut: true}), "only a failed run is shown timed out")

	between := vocab.RunView{Run: record.Run{RunID: id, Task: "t", State: record.Running, Retries: 2, RetryDelay: record.Duration(5 * time.Second),
		Attempts: []record.Attempt{{Number: 1, StartedAt: now.Add(-time.Minute), EndedAt: &end, ExitCode: &code, Reason: "command exited with status 1"}}}}
	assert.Equal(t, "retrying", activeState(between))
	between.Attempts = append(between.Attempts, record.Attempt{Number: 2, StartedAt: now})
	assert.Equal(t, "running", activeState(between), "an attempt runs")

	var buf bytes.Buffer
	finished := vocab.RunView{Run: record.Run{RunID: id, Task: "t", State: record.Succeeded, Retries: 2, CreatedAt: now, FinishedAt: &now,
		Attempts: []record.Attempt{{Number: 1}, {Number: 2}}}}
	printFinished(&buf, screen{width: 200}, []vocab.RunView{finished}, now, false)
	assert.Contains(t, buf.String(), "  attempt 2 of 3\n")
}
