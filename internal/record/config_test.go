package record

import (
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
