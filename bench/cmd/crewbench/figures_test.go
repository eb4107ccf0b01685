package main

import (
	"errors"
	"strings"
	"testing"
)

// Every figure is in the report, measured or not, and says why when it
// is not; issue 25's are counted against their goals, the peers are
// context, the retired ones are in the second table.
func TestReportFigures(t *testing.T) {
	h := &harness{cfg: &config{}, figures: issueFigures()}
	for i, f := range h.figures {
		if f.what == "" || f.goal == "" || f.scenario == "" {
			t.Fatalf("figure %d is incomplete: %+v", i, f)
		}
	}
	h.measured(figDurableDisk, "1.2×", "p10–p90 1.1–1.3", true)
	h.measured(figCobraTmpfs, "1.9×", "p10–p90 1.8–2.0", false)
	h.measured(figVsTsp, "4.1×", "p10–p90 4.0–4.2", false)
	h.measured(figTmpfs, "2.5×", "p10–p90 2.4–2.6", false)
	h.failFigures("queue", errors.New("boom"))
	h.reportFigures()
	out := h.rep.buf.String()
	for _, want := range []string{"| 1.2× | p10–p90 1.1–1.3 | **met** |", "| 1.9× | p10–p90 1.8–2.0 | **not met** |",
		"| peer | `crew start` (disk) ÷ `tsp -f -n` | context | 4.1× | p10–p90 4.0–4.2 | context |",
		"| retired (#11) | `crew start t -- true` ÷ `flock F true`, tmpfs | ≤ 2.0× | 2.5× | p10–p90 2.4–2.6 | **not met** |",
		"| 64 idle waiters: memory (sum of RssAnon) | ≤ 32 MiB | — | — | not measured: scenario failed: boom |",
		"not measured: scenario `kill` not selected", "1 of 2 measured figures meet their goal"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "\n| "); got != int(numFigures)+2 {
		t.Errorf("%d table lines, want two headers and %d figures", got, numFigures)
	}
}
