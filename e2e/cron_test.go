package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeCronRecipe is the README's cron recipe as written: the set-up
// line of the ```sh block just before the ```crontab block, and the
// command of the crontab line (what cron hands to sh -c: the line after
// its five time fields).
func readmeCronRecipe(t *testing.T) (setup, job string) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```sh\n([^\n]*)\n```\n\n```crontab\n([^\n]*)\n```").FindStringSubmatch(string(readme))
	require.NotNil(t, m, "README.md has no cron recipe: a ```sh block with one line, then a ```crontab block with one line")
	fields := regexp.MustCompile(`^(\S+\s+){5}`).FindString(m[2])
	require.NotEmpty(t, fields, "the crontab line has five time fields: %q", m[2])
	return m[1], m[2][len(fields):]
}

// cronCrew is the path the README's recipe gives crew: an absolute one,
// since cron's PATH has no ~/go/bin.
const cronCrew = "/usr/local/bin/crew"

// runAsCron runs a line of the recipe through sh -c as cron would, with
// cron's PATH, and with only crew's path substituted by the binary under
// test; the state root is the test's own (CREW_ROOT).
func (e *env) runAsCron(line string) result {
	e.t.Helper()
	require.True(e.t, strings.HasPrefix(line, cronCrew+" "), "the recipe runs crew by its absolute path %s: %q", cronCrew, line)
	cmd := exec.Command("sh", "-c", e.bin+strings.TrimPrefix(line, cronCrew))
	cmd.Env = append(e.environ(), "PATH=/usr/bin:/bin")
	cmd.Dir = e.dir
	out, err := cmd.Output()
	r := result{Stdout: string(out)}
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(e.t, err, &ee)
		r.Code, r.Stderr = ee.ExitCode(), string(ee.Stderr)
	}
	return r
}

// Issue 24 item 5: the README's cron recipe, run as written, is quiet only
// when the task's own previous run still holds the slot; a start refused
// because other tasks hold the slots exits non-zero and says why (cron
// mails it), so a backup is never skipped without a word. Its set-up line
// sets a retention.
func TestCronRecipeAsWritten(t *testing.T) {
	e := newEnv(t)
	setup, job := readmeCronRecipe(t)
	e.initMax(1) // the machine's cap, which the recipe's set-up keeps
	r := e.runAsCron(setup)
	require.Equal(t, 0, r.Code, "the recipe's set-up: %s", r.Stderr)
	var s struct {
		MaximumInProgress int `json:"maximumInProgress"`
		Retention         struct {
			Retain    int    `json:"retain"`
			RetainFor string `json:"retainFor"`
		} `json:"retention"`
	}
	out := e.run("status", "--json")
	require.NoError(t, json.Unmarshal([]byte(out.Stdout), &s))
	assert.Equal(t, 1, s.MaximumInProgress, "the set-up keeps the cap")
	assert.True(t, s.Retention.Retain > 0 || s.Retention.RetainFor != "", "the recipe sets a retention: %+v", s.Retention)

	task := regexp.MustCompile(` start .* (\S+) -- `).FindStringSubmatch(job)
	require.NotNil(t, task, "the recipe's task: %q", job)

	// Its own previous run still runs: not a word, exit 0.
	release, holder := e.holdSlot(task[1])
	r = e.runAsCron(job)
	assert.Equal(t, 0, r.Code, "refused because its previous run still runs: %s", r.Stderr)
	assert.Empty(t, r.Stdout)
	assert.Empty(t, r.Stderr, "cron mails any output")
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)

	// Another task holds the slot: the job did not run, and says so.
	release, holder = e.holdSlot("unrelated")
	r = e.runAsCron(job)
	assert.Equal(t, 75, r.Code, "refused because other tasks hold the slots")
	assert.Contains(t, r.Stderr, "crew: "+task[1]+": not admitted: all slots are busy (1/1 in use)")
	release()
	require.Equal(t, 0, holder.wait(t, 10*time.Second).Code)
}
