package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

func TestTruncate(t *testing.T) {
	assert.Equal(t, "build", truncate("build", 5))
	assert.Equal(t, "bui…", truncate("build", 4))
	assert.Equal(t, "…", truncate("build", 1))
	assert.Equal(t, "", truncate("build", 0))
	// Wide characters take two columns; a cut never splits one.
	assert.Equal(t, 4, cellWidth("構築"))
	assert.Equal(t, "構…", truncate("構築です", 4))
	assert.Equal(t, "é", truncate("é", 1))
	// Emoji shown as emoji take two columns (issue 24, item 8), and so do
	// flags and joined sequences, which are one character on the screen.
	assert.Equal(t, 2, cellWidth("✅"))
	assert.Equal(t, 2, cellWidth("⚡"))
	assert.Equal(t, 7, cellWidth("build⚡"))
	assert.Equal(t, 2, cellWidth("👩‍💻"))
	assert.Equal(t, 1, cellWidth("e\u0301"), "a combining mark takes none")
	assert.Equal(t, "build…", truncate("build⚡x", 6), "a cut never splits a wide character")
}

// Task names are cut in their middle, keeping more of their end, where
// names of one family differ.
func TestTruncateMiddle(t *testing.T) {
	assert.Equal(t, "build", truncateMiddle("build", 5))
	assert.Equal(t, "integ…:postgres", truncateMiddle("integration-tests:postgres", 15))
	assert.Equal(t, "integ…:mysql-8", truncateMiddle("integration-tests:mysql-8", 14))
	assert.Equal(t, "PR-12…it-tests", truncateMiddle("PR-1234/unit-tests", 14))
	assert.Equal(t, "de…✅✅", truncateMiddle("deploy✅✅", 7), "whole characters only")
	assert.Equal(t, "b…", truncateMiddle("build", 2))
	assert.Equal(t, "", truncateMiddle("build", 0))
	for w := 0; w < 30; w++ {
		assert.LessOrEqual(t, cellWidth(truncateMiddle("構築-integration-✅-tests", w)), w)
	}
	// An escape is never cut in two: "202ename" would read as the name.
	assert.Equal(t, `"evil…name"`, truncateMiddle(`"evil\u202ename"`, 12))
	assert.Equal(t, `"ab…defghij"`, truncateMiddle(`"ab\u202ecdefghij"`, 12))
	assert.Equal(t, `"\u202e…fghijklmnop"`, truncateMiddle(`"\u202eabcdefghijklmnop"`, 20))
	assert.Equal(t, `a\x1b…`, truncate(`a\x1b[2J`, 6))
	assert.Equal(t, `a…`, truncate(`a\x1b[2J`, 5))
	assert.Equal(t, `\q…`, truncate(`\qrstu`, 3), "not an escape: cut anywhere")
}

// The lines after the first hang (are printed indented); a word longer
// than a line is broken, never dropped.
func TestWrapText(t *testing.T) {
	assert.Equal(t, []string{"short"}, wrapText("short", 80, 2))
	assert.Equal(t, []string{"one line"}, wrapText("one line", 0, 2))
	assert.Equal(t, []string{"not admitted: all", "slots are busy", "(4/4 in use)"}, wrapText("not admitted: all slots are busy (4/4 in use)", 18, 2))
	assert.Equal(t, []string{"see", "r-2026120", "2T1118"}, wrapText("see r-20261202T1118", 9, 0))
	assert.Equal(t, []string{"✅", "✅"}, wrapText("✅✅", 1, 0), "a character wider than the line still goes")
}

func TestShellQuote(t *testing.T) {
	for args, want := range map[string]string{
		"make -j2":                    "make -j2",
		"sh -c 'echo hi'":             `sh -c 'echo hi'`,
		"echo it's":                   `echo 'it'\''s'`,
		"printf \n":                   `printf $'\n'`,
		"echo \x1b[31mred":            `echo $'\x1b[31mred'`,
		"ls \u202eevil":               `ls $'\u202eevil'`,
		"x ''":                        "x ''",
		"./deploy.sh --env=prod/eu":   "./deploy.sh --env=prod/eu",
		"echo déploiement $HOME *.go": `echo 'déploiement' '$HOME' '*.go'`,
	} {
		var argv []string
		switch args {
		case "sh -c 'echo hi'":
			argv = []string{"sh", "-c", "echo hi"}
		case "echo it's":
			argv = []string{"echo", "it's"}
		case "printf \n":
			argv = []string{"printf", "\n"}
		case "echo \x1b[31mred":
			argv = []string{"echo", "\x1b[31mred"}
		case "ls \u202eevil":
			argv = []string{"ls", "\u202eevil"}
		case "x ''":
			argv = []string{"x", ""}
		default:
			argv = strings.Fields(args)
		}
		assert.Equal(t, want, shellQuote(argv), "%q", argv)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:                    "850ms",
		4200 * time.Millisecond:                   "4.2s",
		42 * time.Second:                          "42s",
		2*time.Minute + 10*time.Second:            "2m10s",
		3*time.Hour + 4*time.Minute:               "3h04m",
		50 * time.Hour:                            "2d02h",
		-time.Second:                              "-",
		59*time.Minute + 59*time.Second + 999e6:   "59m59s",
		10 * time.Second:                          "10s",
		9*time.Second + 990*time.Millisecond:      "10.0s",
		23*time.Hour + 59*time.Minute + time.Hour: "1d00h",
	} {
		assert.Equal(t, want, shortDuration(d), "%s", d)
	}
}

// Tables fit the width they are given: columns as wide as their cells,
// the flexible one cut first, then the others down to their minimum,
// with an ellipsis; no trailing spaces.
func TestTableFitsWidth(t *testing.T) {
	cols := []column{{title: "ID"}, {title: "TASK", min: 8, max: 24}, {title: "PID", right: true}, {title: "COMMAND", flex: true, min: 10}}
	rows := [][]cell{
		{{text: "3f2a9c0d"}, {text: "a-rather-long-task-name-that-goes-on-and-on"}, {text: "4712"}, {text: shellQuote([]string{"make", "-j2", "all", "install", "DESTDIR=/tmp/some/place/far/away"})}},
		{{text: "77aa88bb"}, {text: "t"}, {text: "-"}, {text: "true"}},
	}
	for _, width := range []int{80, 60, 45} {
		var buf bytes.Buffer
		screen{width: width}.table(&buf, cols, rows)
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		require.Len(t, lines, 3)
		for _, l := range lines {
			assert.LessOrEqual(t, cellWidth(l), width, "width %d: %q", width, l)
			assert.Equal(t, strings.TrimRight(l, " "), l, "trailing spaces: %q", l)
		}
		assert.True(t, strings.HasPrefix(lines[0], "  ID        TASK"), lines[0])
		assert.Contains(t, lines[1], "…", "width %d: the long cells are cut", width)
		assert.Contains(t, lines[2], "77aa88bb  t ")
		assert.True(t, strings.HasSuffix(lines[2], "-  true"), "PID right-aligned: %q", lines[2])
	}
	var buf bytes.Buffer
	screen{width: 200}.table(&buf, cols, rows)
	assert.Contains(t, buf.String(), "a-rather-long-task-name…", "TASK is capped at 24 even with room")
	assert.Contains(t, buf.String(), "DESTDIR=/tmp/some/place/far/away", "room enough: nothing else is cut")
	buf.Reset()
	screen{}.table(&buf, cols, rows)
	assert.NotContains(t, buf.String(), "…", "no width (a pipe): nothing is cut")
	assert.Contains(t, buf.String(), "  3f2a9c0d  a-rather-long-task-name-that-goes-on-and-on  4712  make -j2 all install DESTDIR=/tmp/some/place/far/away\n")
}

// Colour only on a colour screen, around the text, not the padding.
func TestTableColour(t *testing.T) {
	cols := []column{{title: "STATE"}, {title: "X"}}
	rows := [][]cell{{{text: "failed", color: stateColor("failed")}, {text: "x"}}}
	var plain, colour bytes.Buffer
	screen{width: 80}.table(&plain, cols, rows)
	screen{width: 80, color: true}.table(&colour, cols, rows)
	assert.NotContains(t, plain.String(), "\x1b[")
	assert.Contains(t, colour.String(), "  \x1b[31mfailed\x1b[0m  x\n")
}

// Off a terminal: no limit (or $COLUMNS), no colour, whatever NO_COLOR
// says; a terminal's width and NO_COLOR are checked through a real
// pseudo-terminal in e2e.
func TestScreenFor(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	var buf bytes.Buffer
	assert.Equal(t, screen{width: 0}, screenFor(&buf, env(nil)))
	assert.Equal(t, screen{width: 132}, screenFor(&buf, env(map[string]string{"COLUMNS": "132"})))
	assert.Equal(t, screen{width: 0}, screenFor(&buf, env(map[string]string{"COLUMNS": "wide"})))
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, screen{width: 0}, screenFor(f, env(nil)), "a file is no terminal")
	// Colour forced (issue 24, item 9), NO_COLOR first.
	for kv, color := range map[[2]string]bool{
		{"FORCE_COLOR", "1"}: true, {"FORCE_COLOR", "3"}: true, {"CLICOLOR_FORCE", "1"}: true,
		{"FORCE_COLOR", "0"}: false, {"CLICOLOR_FORCE", "0"}: false, {"FORCE_COLOR", ""}: false,
	} {
		assert.Equal(t, screen{color: color}, screenFor(&buf, env(map[string]string{kv[0]: kv[1]})), "%s=%s", kv[0], kv[1])
		assert.Equal(t, screen{}, screenFor(&buf, env(map[string]string{kv[0]: kv[1], "NO_COLOR": "1"})), "%s=%s, NO_COLOR", kv[0], kv[1])
	}
}

// crew status at 80 columns: every row fits, the command is quoted as a
// shell would, durations and pools have columns, short ids name runs.
func TestPrintSnapshotFits80Columns(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.Local)
	id := func(n int) record.RunID {
		return record.RunID(fmt.Sprintf("r-20261129T100211.123456789Z-%08x1e4b5a69", n))
	}
	started := now.Add(-130 * time.Second)
	finished := now.Add(-10 * time.Second)
	code := 2
	snap := &vocab.Snapshot{Root: "/home/me/.local/state/crew", MaximumInProgress: 4, SlotsInUse: 2,
		Pools: []vocab.PoolView{{Name: "deploy", MaximumInProgress: 1, InUse: 1}},
		Active: []vocab.RunView{
			{Run: record.Run{RunID: id(0x3f2a9c0d), Task: "build", State: record.Running, CreatedAt: started, StartedAt: &started, TaskPID: 4712,
				Command: []string{"make", "-j12", "CFLAGS=-O2 -g", "all", "install", "DESTDIR=/var/tmp/a/very/long/path/to/somewhere"}},
				OwnerAlive: true, SupervisorAlive: true, Owner: "alive"},
			{Run: record.Run{RunID: id(0xa1b2c3d4), Task: "deploy:prod-eu-west-1-canary-stage", State: record.Running, CreatedAt: started, StartedAt: &started,
				TaskPID: 4720, SupervisorPID: 4711, Pool: "deploy", Command: []string{"./deploy.sh", "it's"}}, Orphaned: true, OwnerAlive: true, Owner: "alive"},
		},
		Finished: []vocab.RunView{
			{Run: record.Run{RunID: id(0x77aa88bb), Task: "test", State: record.Failed, CreatedAt: started, StartedAt: &started, FinishedAt: &finished,
				ExitCode: &code, Reason: "command exited with status 2 after printing a very long complaint about everything"}},
		},
	}
	var buf bytes.Buffer
	printSnapshot(&buf, screen{width: 80}, snap, selection{}, now)
	out := buf.String()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "State root") || strings.HasPrefix(l, "  a1b2c3d4: orphaned") {
			continue // prose lines wrap as prose
		}
		assert.LessOrEqual(t, cellWidth(l), 80, "%q", l)
	}
	assert.Contains(t, out, "  ID        TASK                 STATE     FOR    POOL     PID  COMMAND\n")
	assert.Contains(t, out, "  3f2a9c0d  build                running   2m10s  -       4712  make -j12 'CFLA…\n")
	assert.Contains(t, out, "  a1b2c3d4  deploy:…anary-stage  orphaned  2m10s  deploy  4720  ./deploy.sh 'it…\n")
	assert.Contains(t, out, "  a1b2c3d4: orphaned: its supervisor (pid 4711) is gone; the command still runs and holds its slot")
	assert.Contains(t, out, "Last 10 finished runs, newest finish first:\n  ID        TASK  STATE   EXIT  STARTED    TOOK  REASON\n")
	assert.Contains(t, out, "  77aa88bb  test  failed     2  11:57:50  2m00s  command exited with status 2 a…\n")
	assert.NotContains(t, out, "\x1b[")
}

// crew status RUN shows the run's history (its events).
func TestPrintRunShowsHistory(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 2, 11, 0, time.UTC)
	r := &vocab.RunView{Run: record.Run{RunID: "r-20261129T100211.123456789Z-3f2a9c0d1e4b5a69", Task: "build", State: record.Succeeded,
		Command: []string{"make"}, CreatedAt: at, StartedAt: &at, FinishedAt: &at,
		Events: []record.Event{{At: at, What: "admitted"}, {At: at, What: "succeeded"}}}}
	var buf bytes.Buffer
	printRun(&buf, screen{width: 80}, r, at)
	assert.Contains(t, buf.String(), "Run:             r-20261129T100211.123456789Z-3f2a9c0d1e4b5a69 (3f2a9c0d)\n")
	assert.Contains(t, buf.String(), "History:\n  "+humanTime(at)+"  admitted\n  "+humanTime(at)+"  succeeded\n")
}
