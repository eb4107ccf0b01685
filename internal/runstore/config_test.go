package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/vocab"
)

func TestLoadConfigMissingIsDefault(t *testing.T) {
	s := newStore(t)
	cfg, exists, err := s.LoadConfig()
	if err != nil || exists {
		t.Fatalf("LoadConfig(no file) = %+v, %v, %v", cfg, exists, err)
	}
	if !reflect.DeepEqual(cfg, record.DefaultConfig()) || cfg.MaximumInProgress != record.DefaultMaximumInProgress || cfg.Version != record.ConfigVersion {
		t.Errorf("LoadConfig(no file) = %+v, want %+v", cfg, record.DefaultConfig())
	}
	// Loading creates nothing.
	assertMissing(t, s.ConfigPath())
	// Nor does it need the root to exist, or create it.
	missing := New(filepath.Join(t.TempDir(), "missing"))
	cfg, exists, err = missing.LoadConfig()
	if err != nil || exists || !reflect.DeepEqual(cfg, record.DefaultConfig()) {
		t.Errorf("LoadConfig(missing root) = %+v, %v, %v", cfg, exists, err)
	}
	assertMissing(t, missing.Root())
}

func TestSaveLoadConfigRoundTrip(t *testing.T) {
	s := newStore(t)
	a := lockAdmission(t, s)
	// SaveConfig sets the version whatever the caller passed.
	if err := a.SaveConfig(record.Config{MaximumInProgress: 7}); err != nil {
		t.Fatal(err)
	}
	cfg, exists, err := s.LoadConfig()
	if err != nil || !exists {
		t.Fatalf("LoadConfig = %+v, %v, %v", cfg, exists, err)
	}
	if !reflect.DeepEqual(cfg, record.Config{Version: record.ConfigVersion, MaximumInProgress: 7}) {
		t.Errorf("LoadConfig = %+v", cfg)
	}
	// Replacing works and leaves only crew.json (no temporary file).
	if err := a.SaveConfig(record.Config{Version: 99, MaximumInProgress: 1, Pools: map[string]int{"gpu": 1}}); err != nil {
		t.Fatal(err)
	}
	cfg, _, err = s.LoadConfig()
	if err != nil || cfg.MaximumInProgress != 1 || cfg.Version != record.ConfigVersion || cfg.Pools["gpu"] != 1 {
		t.Fatalf("LoadConfig after replace = %+v, %v", cfg, err)
	}
	var names []string
	ents, _ := os.ReadDir(s.Root())
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if !reflect.DeepEqual(names, []string{"crew.json"}) {
		t.Errorf("files in the state root: %q, want only crew.json", names)
	}
	assertMode(t, s.ConfigPath(), FilePerm)
	b, _ := os.ReadFile(s.ConfigPath())
	if !strings.HasSuffix(string(b), "}\n") {
		t.Errorf("crew.json does not end with a newline: %q", b)
	}
	// Another store (another process) reads what was saved.
	if cfg, _, err := New(s.Root()).LoadConfig(); err != nil || cfg.MaximumInProgress != 1 {
		t.Errorf("a fresh store loads %+v, %v", cfg, err)
	}
}

// SaveConfig needs the admission lock, and with it a state root; a write
// that fails anyway (here, the root is gone) names the file.
func TestSaveConfigMissingRoot(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "missing"))
	a := &Admission{s: s} // as if the lock were held: the only way to reach SaveConfig without a root
	err := a.SaveConfig(record.Config{MaximumInProgress: 2})
	if err == nil {
		t.Fatal("SaveConfig into a missing root succeeded")
	}
	if !strings.Contains(err.Error(), s.ConfigPath()) {
		t.Errorf("error %q does not name %s", err, s.ConfigPath())
	}
	assertMissing(t, s.Root())
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
			s := newStore(t)
			writeString(t, s.ConfigPath(), tc.content)
			cfg, exists, err := s.LoadConfig()
			if err == nil {
				t.Fatalf("LoadConfig = %+v, want an error", cfg)
			}
			var ce *vocab.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
			}
			if ce.Path != s.ConfigPath() {
				t.Errorf("ConfigError.Path = %q, want %q", ce.Path, s.ConfigPath())
			}
			if !strings.Contains(err.Error(), s.ConfigPath()) {
				t.Errorf("message %q does not contain the path %s", err, s.ConfigPath())
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("message %q does not contain %q", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "crew init --max") {
				t.Errorf("message %q does not say how to fix it", err)
			}
			if ce.Unreadable {
				t.Error("Unreadable() = true for a file that was read and found invalid")
			}
			if ce.Unwrap() == nil || errors.Unwrap(err) == nil {
				t.Error("ConfigError does not unwrap to its cause")
			}
			if !exists {
				t.Error("exists = false for a file that exists")
			}
			if !reflect.DeepEqual(cfg, record.Config{}) {
				t.Errorf("config returned with the error: %+v", cfg)
			}
		})
	}
}

// A crew.json that cannot be read at all (a directory, a link, a FIFO, a
// file over the limit) is a *ConfigError that is Unreadable, never the
// defaults, and reading it never blocks.
func TestLoadConfigUnreadable(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "crew.json")
	writeString(t, outside, `{"version":1,"maximumInProgress":1000}`)
	tests := map[string]func(t *testing.T, path string){
		"directory": func(t *testing.T, path string) { mkdirAll(t, path) },
		"link out of the root": func(t *testing.T, path string) {
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		},
		"link inside the root": func(t *testing.T, path string) {
			writeString(t, path+".real", `{"version":1,"maximumInProgress":1000}`)
			if err := os.Symlink("crew.json.real", path); err != nil {
				t.Fatal(err)
			}
		},
		"FIFO":      func(t *testing.T, path string) { mkfifo(t, path) },
		"oversized": func(t *testing.T, path string) { writeString(t, path, strings.Repeat(" ", MaxConfigBytes)+"{}") },
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			setup(t, s.ConfigPath())
			cfg, err := returnsAtOnce(t, "LoadConfig", func() (record.Config, error) {
				cfg, _, err := s.LoadConfig()
				return cfg, err
			})
			var ce *vocab.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig = %+v, %v; want *ConfigError", cfg, err)
			}
			if !ce.Unreadable {
				t.Errorf("Unreadable() = false for %v", err)
			}
			if ce.Path != s.ConfigPath() || !strings.Contains(err.Error(), s.ConfigPath()) {
				t.Errorf("error %q does not name %s", err, s.ConfigPath())
			}
			if cfg.MaximumInProgress != 0 {
				t.Errorf("config returned with the error: %+v", cfg)
			}
		})
	}
}

// Errors read like a compiler's: PATH:LINE:COL: message, and the hint to
// rewrite the file only where rewriting is a fix (its content, not its
// permissions or type).
func TestConfigErrorIsCompilerStyle(t *testing.T) {
	s := newStore(t)
	writeString(t, s.ConfigPath(), "{\n  \"version\": 1,\n  \"maximumInProgress\": 2,,\n}\n")
	_, _, err := s.LoadConfig()
	var ce *vocab.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("LoadConfig = %v", err)
	}
	want := s.ConfigPath() + ":3:26: malformed JSON: "
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q, want it to start %q", err, want)
	}
	if line, col := ce.Place(); line != 3 || col != 26 {
		t.Errorf("Place() = %d:%d", line, col)
	}
	if !strings.HasSuffix(err.Error(), "; fix it, or rewrite it with `crew init --max N` (which moves this file aside)") {
		t.Errorf("message %q has no hint", err)
	}
	unplaced := &vocab.ConfigError{Path: "/r/crew.json", Err: errors.New(`no "version" field`)}
	if got := unplaced.Message(); got != `/r/crew.json: no "version" field` {
		t.Errorf("Message() = %q", got)
	}
	denied := &vocab.ConfigError{Path: "/r/crew.json", Err: fmt.Errorf("crew.json: %w", fs.ErrPermission), Unreadable: true}
	if got := denied.Error(); strings.Contains(got, "crew init") || got != "/r/crew.json: crew.json: permission denied" {
		t.Errorf("a permission error says %q; no rewrite hint wanted", got)
	}
}

// MoveConfigAside keeps the broken file under a name of its own, never
// over an earlier one.
func TestMoveConfigAside(t *testing.T) {
	s := newStore(t)
	a := lockAdmission(t, s)
	now := time.Date(2026, 11, 29, 19, 4, 22, 0, time.UTC)
	var moved []string
	for i, content := range []string{"{broken one", "{broken two"} {
		writeString(t, s.ConfigPath(), content)
		path, err := a.MoveConfigAside(now)
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, path)
		if got := readString(t, path); got != content {
			t.Errorf("move %d: %s holds %q", i, path, got)
		}
		assertMissing(t, s.ConfigPath())
	}
	want := []string{s.ConfigPath() + ".broken-20261129T190422Z", s.ConfigPath() + ".broken-20261129T190422Z-2"}
	if !reflect.DeepEqual(moved, want) {
		t.Errorf("moved to %q, want %q", moved, want)
	}
}
