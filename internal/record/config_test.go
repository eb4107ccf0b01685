package record

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeConfigValid(t *testing.T) {
	tests := []struct {
		data string
		max  int
	}{
		{`{"version":1,"maximumInProgress":1}`, 1},
		{`{"version":1,"maximumInProgress":4}`, 4},
		{"{\n  \"version\": 1,\n  \"maximumInProgress\": 1000\n}\n", 1000},
		{`{"maximumInProgress":2,"version":1}`, 2},
	}
	for _, tc := range tests {
		cfg, err := DecodeConfig([]byte(tc.data))
		if err != nil {
			t.Errorf("DecodeConfig(%s) = %v", tc.data, err)
			continue
		}
		if cfg.Version != ConfigVersion || cfg.MaximumInProgress != tc.max {
			t.Errorf("DecodeConfig(%s) = %+v, want max %d", tc.data, cfg, tc.max)
		}
	}
}

func TestDecodeConfigErrors(t *testing.T) {
	tests := []struct {
		name, data, wantErr string
	}{
		{"empty", ``, "malformed JSON"},
		{"not JSON", `maximumInProgress = 3`, "malformed JSON"},
		{"truncated", `{"version":1,"maximumInProgress":`, "malformed JSON"},
		{"trailing garbage", `{"version":1,"maximumInProgress":2} x`, "malformed JSON"},
		{"array", `[1]`, "malformed JSON"},
		{"null", `null`, "no \"version\""},
		{"no version", `{"maximumInProgress":2}`, "no \"version\""},
		{"version 0", `{"version":0,"maximumInProgress":2}`, "unknown config version 0"},
		{"version 2", `{"version":2,"maximumInProgress":2}`, "unknown config version 2"},
		{"version string", `{"version":"1","maximumInProgress":2}`, "malformed JSON"},
		{"unknown field", `{"version":1,"maximumInProgress":2,"maxInProgress":8}`, "unknown field"},
		{"misspelt field", `{"version":1,"maximumInProgres":8}`, "unknown field"},
		{"max string", `{"version":1,"maximumInProgress":"2"}`, "malformed config"},
		{"max float", `{"version":1,"maximumInProgress":2.5}`, "malformed config"},
		{"max missing", `{"version":1}`, "maximumInProgress is 0"},
		{"max 0", `{"version":1,"maximumInProgress":0}`, "maximumInProgress is 0"},
		{"max negative", `{"version":1,"maximumInProgress":-3}`, "maximumInProgress is -3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := DecodeConfig([]byte(tc.data))
			if err == nil {
				t.Fatalf("DecodeConfig(%s) = %+v, want an error containing %q", tc.data, cfg, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("DecodeConfig(%s) = %q, want it to contain %q", tc.data, err, tc.wantErr)
			}
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Errorf("DecodeConfig returned a config with its error: %+v", cfg)
			}
		})
	}
}

// Errors point at the offending byte, as a compiler would, so that
// PATH:LINE:COL takes an editor to it.
func TestDecodeConfigErrorPlaces(t *testing.T) {
	tests := []struct {
		data      string
		line, col int
		at        string // what is there, "" for the end of the file
	}{
		{"{oops", 1, 2, "o"},
		{"{\n  \"version\": 1,\n  \"maximumInProgress\": 2,,\n}\n", 3, 26, ","},
		{`{"version":1,"maximumInProgress":"2"}`, 1, 34, `"`},
		{`{"version":"1","maximumInProgress":2}`, 1, 12, `"`},
		{"{\"version\":1,\n\"maximumInProgress\":2.5}", 2, 21, "2"},
		{"  [1]", 1, 3, "["},
		{`{"version":1,"maximumInProgress":2}  x`, 1, 38, "x"},
		{`{"version":1,"maximumInProgress":`, 1, 34, ""},
	}
	for _, tc := range tests {
		_, err := DecodeConfig([]byte(tc.data))
		var syn *SyntaxError
		if !errors.As(err, &syn) {
			t.Errorf("DecodeConfig(%q) = %v, want a *SyntaxError", tc.data, err)
			continue
		}
		if syn.Line != tc.line || syn.Col != tc.col {
			t.Errorf("DecodeConfig(%q) at %d:%d, want %d:%d (%v)", tc.data, syn.Line, syn.Col, tc.line, tc.col, err)
			continue
		}
		line := strings.Split(tc.data, "\n")[tc.line-1]
		got := ""
		if tc.col <= len(line) {
			got = line[tc.col-1 : tc.col]
		}
		if got != tc.at {
			t.Errorf("DecodeConfig(%q) points at %q, want %q", tc.data, got, tc.at)
		}
	}
	if _, err := DecodeConfig([]byte(`{"version":1,"maximumInProgress":"2"}`)); !strings.Contains(err.Error(), `"maximumInProgress" is a JSON string`) {
		t.Errorf("the field is named as in the file: %v", err)
	}
}
