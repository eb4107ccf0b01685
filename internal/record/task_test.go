package record

import (
	"strings"
	"testing"
)

func TestValidateTask(t *testing.T) {
	tests := []struct {
		name    string
		task    string
		wantErr string // empty: valid
	}{
		{"colon", "dispatch:admission", ""},
		{"slash", "PR-12/tests", ""},
		{"space", "Deploy Prod", ""},
		{"dots", "../../etc/passwd", ""}, // data, never a file name
		{"dot", ".", ""},
		{"single byte", "x", ""},
		{"200 bytes", strings.Repeat("a", MaxTaskBytes), ""},
		{"200 bytes multibyte", strings.Repeat("é", MaxTaskBytes/2), ""},
		{"unicode", "déploiement-生产-🚀", ""},
		{"tab-free punctuation", `a!"#$%&'()*+,-./;<=>?@[\]^_{|}~`, ""},
		{"leading and trailing spaces", " x ", ""},

		{"empty", "", "empty"},
		{"201 bytes", strings.Repeat("a", MaxTaskBytes+1), "201 bytes"},
		{"201 bytes multibyte", strings.Repeat("é", 100) + "a", "201 bytes"},
		{"invalid UTF-8", "deploy\xff", "not valid UTF-8"},
		{"truncated UTF-8", "é"[:1], "not valid UTF-8"},
		{"newline", "a\nb", "control character"},
		{"carriage return", "a\rb", "control character"},
		{"tab", "a\tb", "control character"},
		{"NUL", "a\x00b", "control character"},
		{"DEL", "a\x7fb", "control character"},
		{"escape", "\x1b[31mred", "control character"},
		{"C1 control", "a\u0085b", "control character"},
		{"leading newline", "\nx", "control character"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTask(tc.task)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateTask(%q) = %v, want nil", tc.task, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateTask(%q) = nil, want error containing %q", tc.task, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ValidateTask(%q) = %q, want it to contain %q", tc.task, err, tc.wantErr)
			}
			// The message is printable: it quotes the name, never echoes
			// raw control bytes to a terminal.
			for _, r := range err.Error() {
				if r < 0x20 || r == 0x7f {
					t.Errorf("error message contains raw control character %U: %q", r, err)
				}
			}
		})
	}
}

func TestValidateTaskControlCharacterPosition(t *testing.T) {
	err := ValidateTask("ab\x01")
	if err == nil || !strings.Contains(err.Error(), "at byte 2") || !strings.Contains(err.Error(), "U+0001") {
		t.Fatalf("ValidateTask = %v, want the character and its byte offset", err)
	}
}

func TestValidateNewTask(t *testing.T) {
	tests := []struct {
		name    string
		task    string
		wantErr string // empty: valid
	}{
		{"plain", "build", ""},
		{"unicode", "déploiement-生产-🚀", ""},
		{"combining mark", "e\u0301", ""},
		{"space", "Deploy Prod", ""},
		{"r without digit", "r-build", ""},
		{"R and digit", "R-1", ""},
		{"r alone", "r-", ""},
		{"digit later", "xr-1", ""},
		{"leading dash", "-x", ""},

		{"run id", "r-20260101T000000.000000000Z-00000000000000aa", "is reserved"},
		{"run id prefix", "r-2026", "is reserved"},
		{"r and digit", "r-1", "is reserved"},
		{"right-to-left override", "build\u202egnp.exe", "does not print (U+202E) at byte 5"},
		{"line separator", "a\u2028b", "does not print (U+2028)"},
		{"paragraph separator", "a\u2029b", "does not print (U+2029)"},
		{"zero width space", "a\u200bb", "does not print (U+200B)"},
		{"zero width joiner", "a\u200db", "does not print (U+200D)"},
		{"byte order mark", "\ufeffx", "does not print (U+FEFF)"},
		{"no-break space", "a\u00a0b", "does not print (U+00A0)"},
		{"ideographic space", "a\u3000b", "does not print (U+3000)"},
		{"private use", "a\ue000b", "does not print (U+E000)"},
		{"unassigned", "a\U000e0080b", "does not print"},
		{"control still", "a\nb", "control character"},
		{"empty still", "", "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateNewTask(tc.task)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateNewTask(%q) = %v, want nil", tc.task, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateNewTask(%q) = %v, want an error containing %q", tc.task, err, tc.wantErr)
			}
			for _, r := range err.Error() {
				if r < 0x20 || r == 0x7f || r == 0x202e || r == 0x2028 || r == 0x200b {
					t.Errorf("error message contains raw %U: %q", r, err)
				}
			}
			// Stored names stay readable: the old rules accept what is not
			// a control character.
			if !strings.Contains(tc.wantErr, "control") && tc.task != "" {
				if err := ValidateTask(tc.task); err != nil {
					t.Errorf("ValidateTask(%q) = %v: a stored name became unreadable", tc.task, err)
				}
			}
		})
	}
	if err := ValidateNewTask("r-1"); err == nil || !strings.Contains(err.Error(), "look like run ids") {
		t.Errorf("the reserved-name error says why: %v", err)
	}
}

func TestValidateNewPoolName(t *testing.T) {
	if err := ValidateNewPoolName("r-1"); err != nil {
		t.Errorf("a run-id-shaped pool name is fine: %v", err)
	}
	if err := ValidateNewPoolName("deploy\u202e"); err == nil || !strings.Contains(err.Error(), `pool name "deploy\u202e" has a character that does not print (U+202E)`) {
		t.Errorf("ValidateNewPoolName = %v", err)
	}
	if err := ValidatePoolName("deploy\u202e"); err != nil {
		t.Errorf("a stored pool name stays readable: %v", err)
	}
}
