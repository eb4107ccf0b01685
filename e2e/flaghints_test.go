package e2e

// Flag mistakes get the hint that fits them (issue 24, item 3): a command
// given without `--`, a mistyped flag, a task name that begins with -.

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFlagMistakesGetTheirHint(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		// The command's own flag, read as crew's: -- was forgotten.
		{[]string{"start", "build", "make", "-j2"},
			"crew: unknown shorthand flag: 'j' in -j2: did you forget `--` before the command? As in: crew start build -- make -j2\n"},
		{[]string{"start", "--pool", "deploy", "build", "./deploy.sh", "--prod", "now"},
			"crew: unknown flag: --prod: did you forget `--` before the command? As in: crew start build -- ./deploy.sh --prod ...\n"},
		{[]string{"start", "lint", "eslint", "--max-warnings=0", "src"},
			"crew: unknown flag: --max-warnings: did you forget `--` before the command? As in: crew start lint -- eslint --max-warnings=0 ...\n"},
		// No flag to trip on: the command is missing its --.
		{[]string{"start", "build", "make", "all"},
			"crew: missing `--` before the command: did you forget it? As in: crew start build -- make all\n"},
		// A mistyped flag of crew's, anywhere: the nearest flag.
		{[]string{"start", "--wiat", "build", "--", "make"}, "crew: unknown flag: --wiat: did you mean --wait?\n"},
		{[]string{"start", "build", "--timeuot=10m", "--", "make"}, "crew: unknown flag: --timeuot: did you mean --timeout?\n"},
		{[]string{"start", "-wait", "build", "--", "make"}, "crew: unknown shorthand flag: 'w' in -wait: did you mean --wait?\n"},
		{[]string{"status", "--jsno"}, "crew: unknown flag: --jsno: did you mean --json?\n"},
		{[]string{"history", "--limt", "5"}, "crew: unknown flag: --limt: did you mean --limit?\n"},
		// A task name that begins with -: --task.
		{[]string{"start", "-nightly", "--", "./backup.sh"},
			"crew: unknown shorthand flag: 'n' in -nightly (a task name that begins with - is given as --task=NAME)\n"},
		{[]string{"start", "--nightly-backup", "--", "./backup.sh"},
			"crew: unknown flag: --nightly-backup (a task name that begins with - is given as --task=NAME)\n"},
	} {
		r := e.run(c.args...)
		assert.Equal(t, 64, r.Code, "%v: %s", c.args, r.Stderr)
		want := c.want + "Run 'crew " + c.args[0] + " --help' for usage.\n"
		assert.Equal(t, want, r.Stderr, "%v", c.args)
		assert.Empty(t, r.Stdout)
	}
	assert.NoDirExists(t, e.root, "no usage error touched the state root")
}
