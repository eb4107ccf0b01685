package runstore

import (
	"errors"
	"os"
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

func TestLoadConfigMissingIsDefault(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	cfg, exists, err := LoadConfig(l)
	if err != nil || exists {
		t.Fatalf("LoadConfig(no file) = %+v, %v, %v", cfg, exists, err)
	}
	if !reflect.DeepEqual(cfg, DefaultConfig()) || cfg.MaximumInProgress != DefaultMaximumInProgress || cfg.Version != ConfigVersion {
		t.Errorf("LoadConfig(no file) = %+v, want %+v", cfg, DefaultConfig())
	}
	// Loading creates nothing.
	if _, err := os.Stat(l.ConfigPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadConfig created %s", l.ConfigPath())
	}
	// Nor does it need the root to exist.
	cfg, exists, err = LoadConfig(Layout{Root: l.Root + "/missing"})
	if err != nil || exists || !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Errorf("LoadConfig(missing root) = %+v, %v, %v", cfg, exists, err)
	}
}

func TestSaveLoadConfigRoundTrip(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	// SaveConfig sets the version whatever the caller passed.
	if err := SaveConfig(l, Config{MaximumInProgress: 7}); err != nil {
		t.Fatal(err)
	}
	cfg, exists, err := LoadConfig(l)
	if err != nil || !exists {
		t.Fatalf("LoadConfig = %+v, %v, %v", cfg, exists, err)
	}
	if !reflect.DeepEqual(cfg, Config{Version: ConfigVersion, MaximumInProgress: 7}) {
		t.Errorf("LoadConfig = %+v", cfg)
	}
	// Replacing works and leaves only crew.json.
	if err := SaveConfig(l, Config{Version: 99, MaximumInProgress: 1}); err != nil {
		t.Fatal(err)
	}
	cfg, _, err = LoadConfig(l)
	if err != nil || cfg.MaximumInProgress != 1 || cfg.Version != ConfigVersion {
		t.Fatalf("LoadConfig after replace = %+v, %v", cfg, err)
	}
	assertOnlyFiles(t, l.Root, "crew.json")
	assertMode(t, l.ConfigPath(), FilePerm)
	b, _ := os.ReadFile(l.ConfigPath())
	if !strings.HasSuffix(string(b), "}\n") {
		t.Errorf("crew.json does not end with a newline: %q", b)
	}
}

func TestSaveConfigMissingRoot(t *testing.T) {
	l := Layout{Root: t.TempDir() + "/missing"}
	err := SaveConfig(l, Config{MaximumInProgress: 2})
	if err == nil {
		t.Fatal("SaveConfig into a missing root succeeded")
	}
	if !strings.Contains(err.Error(), l.ConfigPath()) {
		t.Errorf("error %q does not name %s", err, l.ConfigPath())
	}
}

func TestLoadConfigErrorsNameTheFile(t *testing.T) {
	tests := []struct {
		name, content, wantErr string
	}{
		{"unknown version", `{"version":3,"maximumInProgress":2}`, "unknown config version 3"},
		{"malformed JSON", `{"version":1,`, "malformed JSON"},
		{"unknown field", `{"version":1,"maximumInProgress":2,"max":3}`, "unknown field"},
		{"max 0", `{"version":1,"maximumInProgress":0}`, "at least 1"},
		{"empty file", ``, "malformed JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := Layout{Root: t.TempDir()}
			if err := os.WriteFile(l.ConfigPath(), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, exists, err := LoadConfig(l)
			if err == nil {
				t.Fatalf("LoadConfig = %+v, want an error", cfg)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
			}
			if ce.Path != l.ConfigPath() {
				t.Errorf("ConfigError.Path = %q, want %q", ce.Path, l.ConfigPath())
			}
			if !strings.Contains(err.Error(), l.ConfigPath()) {
				t.Errorf("message %q does not contain the path %s", err, l.ConfigPath())
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("message %q does not contain %q", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "crew init --max") {
				t.Errorf("message %q does not say how to fix it", err)
			}
			if ce.Unwrap() == nil || errors.Unwrap(err) == nil {
				t.Error("ConfigError does not unwrap to its cause")
			}
			if !exists {
				t.Error("exists = false for a file that exists")
			}
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Errorf("config returned with the error: %+v", cfg)
			}
		})
	}
}

func TestLoadConfigUnreadable(t *testing.T) {
	// crew.json is a directory: reading fails with something other than
	// "not exist", which must not fall back to the defaults.
	l := Layout{Root: t.TempDir()}
	if err := os.Mkdir(l.ConfigPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadConfig(l)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("LoadConfig(crew.json is a directory) = %v, want *ConfigError", err)
	}
	if ce.Path != l.ConfigPath() || !strings.Contains(err.Error(), l.ConfigPath()) {
		t.Errorf("error %q does not name %s", err, l.ConfigPath())
	}
}
