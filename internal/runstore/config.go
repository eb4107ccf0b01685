package runstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ConfigVersion is the version of crew.json this crew reads and writes.
const ConfigVersion = 1

// DefaultMaximumInProgress is the cap when the state root has no crew.json.
const DefaultMaximumInProgress = 4

// Config is the state root's crew.json.
type Config struct {
	Version           int `json:"version"`
	MaximumInProgress int `json:"maximumInProgress"`
	// Pools have caps of their own, all inside MaximumInProgress: a run
	// started with --pool NAME needs a free slot in both.
	Pools map[string]int `json:"pools,omitempty"`
}

// PoolNames lists the configured pools, sorted.
func (c Config) PoolNames() []string {
	names := make([]string, 0, len(c.Pools))
	for n := range c.Pools {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ValidatePoolName checks a pool name: the same rules as task names.
func ValidatePoolName(name string) error {
	if err := ValidateTask(name); err != nil {
		return fmt.Errorf("pool name: %s", strings.TrimPrefix(err.Error(), "task name "))
	}
	return nil
}

// ConfigError is a crew.json that cannot be used; it names the file.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("config %s: %v; fix or remove it, or rewrite it with `crew init --max N`", e.Path, e.Err)
}
func (e *ConfigError) Unwrap() error { return e.Err }

// DefaultConfig is what a state root without crew.json uses.
func DefaultConfig() Config {
	return Config{Version: ConfigVersion, MaximumInProgress: DefaultMaximumInProgress}
}

// LoadConfig reads crew.json. A missing file yields the defaults and
// exists=false; a malformed one is a *ConfigError.
func LoadConfig(l Layout) (cfg Config, exists bool, err error) {
	path := l.ConfigPath()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return DefaultConfig(), false, nil
	}
	if err != nil {
		return Config{}, false, &ConfigError{Path: path, Err: unwrapPath(err)}
	}
	cfg, err = DecodeConfig(data)
	if err != nil {
		return Config{}, true, &ConfigError{Path: path, Err: err}
	}
	return cfg, true, nil
}

// DecodeConfig parses and validates crew.json's content. Unknown fields are
// an error: a misspelt key must not silently fall back to a default.
func DecodeConfig(data []byte) (Config, error) {
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return Config{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if probe.Version == nil {
		return Config{}, fmt.Errorf("no \"version\" field")
	}
	if *probe.Version != ConfigVersion {
		return Config{}, fmt.Errorf("unknown config version %d (this crew reads version %d)", *probe.Version, ConfigVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("malformed config: %w", err)
	}
	if cfg.MaximumInProgress < 1 {
		return Config{}, fmt.Errorf("maximumInProgress is %d; it must be at least 1", cfg.MaximumInProgress)
	}
	for _, name := range cfg.PoolNames() {
		if err := ValidatePoolName(name); err != nil {
			return Config{}, fmt.Errorf("pools: %w", err)
		}
		if cfg.Pools[name] < 1 {
			return Config{}, fmt.Errorf("pool %q has cap %d; it must be at least 1", name, cfg.Pools[name])
		}
	}
	return cfg, nil
}

// SaveConfig writes crew.json durably and atomically.
func SaveConfig(l Layout, cfg Config) error {
	cfg.Version = ConfigVersion
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	return WriteDurable(l.ConfigPath(), append(b, '\n'))
}
