package main

import (
	"errors"
	"strings"
	"testing"
)

// Every figure of the issue is in the report, measured or not, and says
// why when it is not.
func TestReportFigures(t *testing.T) {
	h := &harness{cfg: &config{}, figures: issueFigures()}
	for i, f := range h.figures {
		if f.what == "" || f.goal == "" || f.scenario == "" {
			t.Fatalf("figure %d is incomplete: %+v", i, f)
		}
	}
	h.measured(figTmpfs, "1.5×", "p10–p90 1.4–1.6", true)
	h.measured(figDisk, "3.5×", "p10–p90 3.4–3.6", false)
	h.failFigures("queue", errors.New("boom"))
	h.reportFigures()
	out := h.rep.buf.String()
	for _, want := range []string{"| 1.5× | p10–p90 1.4–1.6 | **met** |", "| 3.5× | p10–p90 3.4–3.6 | **not met** |",
		"not measured: scenario failed: boom", "not measured: scenario `history` not selected", "1 of 2 measured figures meet their goal"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "\n| "); got != int(numFigures)+1 {
		t.Errorf("%d table lines, want a header and %d figures", got, numFigures)
	}
}
