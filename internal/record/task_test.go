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
