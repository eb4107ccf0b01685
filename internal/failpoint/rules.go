package failpoint

import (
	"fmt"
	"slices"
	"strings"
)

// rule is what CREW_FAILPOINT asks of one failpoint.
type rule struct {
	action string
	arg    string
}

// parseRules reads CREW_FAILPOINT: comma-separated <name>:<action>[:<arg>].
// A name that is not a failpoint, or an action its kind does not take, is
// an error that says which are: a rule that silently does nothing would
// let a test pass without forcing what it means to force.
func parseRules(spec string) (map[Name]rule, error) {
	m := map[Name]rule{}
	for _, s := range strings.Split(spec, ",") {
		if s == "" {
			continue
		}
		name, rest, _ := strings.Cut(s, ":")
		action, arg, _ := strings.Cut(rest, ":")
		p, ok := point(name)
		if !ok {
			return nil, fmt.Errorf("CREW_FAILPOINT: %q is not a failpoint; the failpoints are %s", name, strings.Join(names(), ", "))
		}
		if !slices.Contains(Actions[p.Kind], action) {
			return nil, fmt.Errorf("CREW_FAILPOINT: failpoint %s takes %s, not %q", name, strings.Join(Actions[p.Kind], " or "), action)
		}
		if (action == "wait" || action == "error") && arg == "" {
			return nil, fmt.Errorf("CREW_FAILPOINT: %s:%s needs an argument (%s)", name, action, map[string]string{"wait": "a path", "error": "an errno"}[action])
		}
		m[p.Name] = rule{action: action, arg: arg}
	}
	return m, nil
}

func point(name string) (Point, bool) {
	for _, p := range Points {
		if p.Name.name == name {
			return p, true
		}
	}
	return Point{}, false
}

func names() []string {
	out := make([]string, len(Points))
	for i, p := range Points {
		out[i] = p.Name.name
	}
	return out
}
