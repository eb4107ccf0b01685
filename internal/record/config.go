package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/bytesize"
	"github.com/crew-dev/crew/internal/duration"
)

// ConfigVersion is the version of crew.json this crew reads and writes.
const ConfigVersion = 1

// DefaultMaximumInProgress is the cap when there is no config.
const DefaultMaximumInProgress = 4

// Config is the state root's crew.json.
type Config struct {
	Version           int `json:"version"`
	MaximumInProgress int `json:"maximumInProgress"`
	// Pools have caps of their own, all inside MaximumInProgress: a run
	// started with --pool NAME needs a free slot in both.
	Pools map[string]int `json:"pools,omitempty"`
	// Group, if set, is the group the state root is shared with (crew
	// init --group): its members may write the root, and crew creates
	// directories 2770 and files 0660. Stored as "group".
	Group string `json:"-"`
	// Retain keeps the newest Retain finished runs (0: no limit by count).
	// Stored as "retain".
	Retain int `json:"-"`
	// RetainFor keeps finished runs younger than RetainFor (0: no limit by
	// age). Stored as "retainFor", text such as "30d" or "12h".
	RetainFor time.Duration `json:"-"`
	// LogMax caps each run's log, in bytes (0: no cap); crew start
	// --log-max overrides it. Stored as "logMax", text such as "10MiB".
	LogMax int64 `json:"-"`
}

// MinLogMax is the smallest log cap: the log keeps its first half and
// the newest output in eighths of the cap, and much smaller pieces would
// cost more in files than they save.
const MinLogMax = 64 << 10

// KeepsEverything reports whether no retention is configured.
func (c Config) KeepsEverything() bool { return c.Retain == 0 && c.RetainFor == 0 }

// configWire is crew.json as stored: the retention and log fields are
// optional (omitted when unset, so a config that does not use them stays
// readable by a crew that predates them) and durations and sizes are text.
type configWire struct {
	Version           int            `json:"version"`
	MaximumInProgress int            `json:"maximumInProgress"`
	Pools             map[string]int `json:"pools,omitempty"`
	Retain            *int           `json:"retain,omitempty"`
	RetainFor         *string        `json:"retainFor,omitempty"`
	LogMax            *string        `json:"logMax,omitempty"`
	Group             string         `json:"group,omitempty"`
}

// DefaultConfig is what a state root without crew.json uses.
func DefaultConfig() Config {
	return Config{Version: ConfigVersion, MaximumInProgress: DefaultMaximumInProgress}
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

// ValidateNewPoolName checks the name of a pool being added: the rules of
// ValidatePoolName, and every character prints (as for new task names).
// Run-id-shaped names are fine: a pool is never named where a run is.
func ValidateNewPoolName(name string) error {
	if err := ValidatePoolName(name); err != nil {
		return err
	}
	return printable("pool name", name)
}

// Encode renders the config as it is stored.
func (c Config) Encode() ([]byte, error) {
	w := configWire{Version: ConfigVersion, MaximumInProgress: c.MaximumInProgress, Pools: c.Pools, Group: c.Group}
	if c.Retain > 0 {
		w.Retain = &c.Retain
	}
	if c.RetainFor > 0 {
		s := duration.Format(c.RetainFor)
		w.RetainFor = &s
	}
	if c.LogMax > 0 {
		s := bytesize.Flag(c.LogMax)
		w.LogMax = &s
	}
	b, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return append(b, '\n'), nil
}

// SyntaxError is a config that is not the JSON crew expects, with the
// place (1-based line and column) where it goes wrong, when known.
type SyntaxError struct {
	Line, Col int
	Err       error
}

func (e *SyntaxError) Error() string {
	if e.Line == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("%d:%d: %v", e.Line, e.Col, e.Err)
}
func (e *SyntaxError) Unwrap() error { return e.Err }

// DecodeConfig parses and validates crew.json's content. Unknown fields are
// an error: a misspelt key must not silently fall back to a default.
func DecodeConfig(data []byte) (Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w struct {
		configWire
		Version *int `json:"version"`
	}
	if err := dec.Decode(&w); err != nil {
		return Config{}, positioned(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Config{}, at(data, skipSpace(data, dec.InputOffset()), errors.New("malformed JSON: unexpected data after the config object"))
	}
	if w.Version == nil {
		return Config{}, errors.New("no \"version\" field")
	}
	if *w.Version != ConfigVersion {
		return Config{}, fmt.Errorf("unknown config version %d (this crew reads version %d)", *w.Version, ConfigVersion)
	}
	cfg := Config{Version: *w.Version, MaximumInProgress: w.MaximumInProgress, Pools: w.Pools, Group: w.Group}
	if err := w.decodeLimits(&cfg); err != nil {
		return Config{}, err
	}
	if cfg.MaximumInProgress < 1 {
		return Config{}, fmt.Errorf("maximumInProgress is %d; it must be at least 1", cfg.MaximumInProgress)
	}
	if cfg.Group != "" {
		if err := printable("group", cfg.Group); err != nil || strings.ContainsAny(cfg.Group, ": ") {
			return Config{}, fmt.Errorf("group %q is not a group name", cfg.Group)
		}
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

// decodeLimits validates and converts the retention and log fields.
func (w configWire) decodeLimits(cfg *Config) error {
	if w.Retain != nil {
		if *w.Retain < 1 {
			return fmt.Errorf("retain is %d; it must be at least 1 (remove the field to keep every finished run)", *w.Retain)
		}
		cfg.Retain = *w.Retain
	}
	if w.RetainFor != nil {
		d, err := duration.Parse(*w.RetainFor)
		if err != nil {
			return fmt.Errorf("retainFor: %w", err)
		}
		if d <= 0 {
			return fmt.Errorf("retainFor is %q; it must be positive (remove the field to keep runs of any age)", *w.RetainFor)
		}
		cfg.RetainFor = d
	}
	if w.LogMax != nil {
		n, err := bytesize.Parse(*w.LogMax)
		if err != nil {
			return fmt.Errorf("logMax: %w", err)
		}
		if n < MinLogMax {
			return fmt.Errorf("logMax is %q; it must be at least %s (remove the field for logs without a cap)", *w.LogMax, bytesize.Flag(MinLogMax))
		}
		cfg.LogMax = n
	}
	return nil
}

// positioned turns a decoding error into a SyntaxError naming the line and
// column of the offending byte.
func positioned(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		// Offset counts the offending byte: it is the one before.
		return at(data, syn.Offset-1, fmt.Errorf("malformed JSON: %w", err))
	case errors.As(err, &typ) && typ.Field == "":
		return at(data, skipSpace(data, 0), fmt.Errorf("malformed JSON: the file holds a JSON %s, not an object", typ.Value))
	case errors.As(err, &typ) && typ.Field == "version":
		return at(data, valueStart(data, typ.Offset), fmt.Errorf("malformed JSON: \"version\" is a JSON %s, not a number", typ.Value))
	case errors.As(err, &typ):
		field := strings.TrimPrefix(typ.Field, "configWire.")
		return at(data, valueStart(data, typ.Offset), fmt.Errorf("malformed config: %q is a JSON %s, not %s", field, typ.Value, typ.Type))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return at(data, int64(len(data)), fmt.Errorf("malformed JSON: %w (the file is empty or cut short)", err))
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return &SyntaxError{Err: fmt.Errorf("malformed config: %s (known fields: version, maximumInProgress, pools, retain, retainFor, logMax, group)", strings.TrimPrefix(err.Error(), "json: "))}
	}
	return &SyntaxError{Err: fmt.Errorf("malformed JSON: %w", err)}
}

// at locates byte offset off of data as a 1-based line and column.
func at(data []byte, off int64, err error) *SyntaxError {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return &SyntaxError{Line: line, Col: col, Err: err}
}

// valueStart finds the start of the JSON scalar that ends just before
// off (where encoding/json reports a value of the wrong type), so that
// the column points at the value, not past it.
func valueStart(data []byte, off int64) int64 {
	off = min(max(off, 0), int64(len(data)))
	i := off - 1
	switch {
	case i < 0:
		return off
	case data[i] == '"':
		for i--; i >= 0; i-- {
			if data[i] == '"' && (i == 0 || data[i-1] != '\\') {
				return i
			}
		}
		return off
	}
	for i >= 0 && strings.IndexByte("+-.0123456789eEtruefalsn", data[i]) >= 0 {
		i--
	}
	return i + 1
}

// skipSpace is the offset of the first non-space byte at or after off.
func skipSpace(data []byte, off int64) int64 {
	for off < int64(len(data)) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
		off++
	}
	return off
}
