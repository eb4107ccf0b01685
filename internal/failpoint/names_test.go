package failpoint

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The table of failpoints in docs/failpoints.md is Points, name for name, in order,
// with each one's actions and where it is.
func TestDocsListEveryFailpoint(t *testing.T) {
	b, err := os.ReadFile("../../docs/failpoints.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| ([^|]+) \\| (.+) \\|$")
	section := string(b)
	var got []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		got = append(got, m[1]+" | "+m[2]+" | "+m[3])
	}
	kinds := map[Kind]string{Step: "`kill`, `wait:`, `panic`", Guard: "`skip`", Fault: "`error:`"}
	var want []string
	for _, p := range Points {
		want = append(want, p.Name.String()+" | "+kinds[p.Kind]+" | "+p.Where)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/failpoints.md's failpoint table:\n%s\nwant (internal/failpoint/names.go):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Every failpoint has a name of its own.
func TestFailpointNamesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Points {
		if seen[p.Name.String()] || p.Name.String() == "" {
			t.Errorf("failpoint %q listed twice or unnamed", p.Name)
		}
		seen[p.Name.String()] = true
	}
}

func TestParseRules(t *testing.T) {
	good := "admission-locked:wait:/tmp/g,fence:skip,finish-write:error:ENOSPC:/tmp/x,launched:kill,,exited:panic"
	m, err := parseRules(good)
	if err != nil {
		t.Fatalf("parseRules(%q) = %v", good, err)
	}
	if r := m[AdmissionLocked]; r.action != "wait" || r.arg != "/tmp/g" {
		t.Errorf("admission-locked = %+v", r)
	}
	if r := m[FinishWrite]; r.action != "error" || r.arg != "ENOSPC:/tmp/x" {
		t.Errorf("finish-write = %+v", r)
	}
	for spec, want := range map[string]string{
		"admision-locked:kill":     `"admision-locked" is not a failpoint; the failpoints are admission-lock, admission-contended`,
		"admission-locked:skip":    "failpoint admission-locked takes kill or wait or panic, not \"skip\"",
		"fence:kill":               "failpoint fence takes skip, not \"kill\"",
		"fork-exec:wait:/tmp/x":    "failpoint fork-exec takes error, not \"wait\"",
		"launched":                 "failpoint launched takes kill or wait or panic, not \"\"",
		"admission-locked:wait":    "admission-locked:wait needs an argument (a path)",
		"finish-write:error":       "finish-write:error needs an argument (an errno)",
		"launched:kill,typo:panic": `"typo" is not a failpoint`,
	} {
		if _, err := parseRules(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseRules(%q) = %v, want an error containing %q", spec, err, want)
		}
	}
}
