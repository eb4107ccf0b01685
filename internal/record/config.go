package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crew-dev/crew/internal/bytesize"
	"github.com/crew-dev/crew/internal/duration"
)

// ConfigVersion is the version of crew.json this crew writes. It is the
// state root's format: version 2 keeps run records as slot files
// (<id>.run), which a crew of version 1 would not see in the active set
// (and so could over-admit): such a crew refuses a version 2 crew.json
// ("unknown config version 2"). This crew reads version 1 too, and
// converts such a root before its first reservation.
const ConfigVersion = 2

// readsConfigVersion reports whether this crew reads crew.json of
// version v.
func readsConfigVersion(v int) bool { return v == 1 || v == ConfigVersion }

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

// Encode renders the config as it is stored in a state root.
func (c Config) Encode() ([]byte, error) { return c.EncodeVersion(ConfigVersion) }

// V1 is the config version the etcd store writes: its records are JSON
// values, unchanged by state-root version 2, so crews that read only
// version 1 share a cluster with this one.
const V1 = 1

// EncodeVersion renders the config as version v says (the fields are the
// same in versions 1 and 2; the version says how the store keeps runs).
func (c Config) EncodeVersion(v int) ([]byte, error) {
	w := configWire{Version: v, MaximumInProgress: c.MaximumInProgress, Pools: c.Pools, Group: c.Group}
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

// readsConfig is readsConfigVersion, replaceable by a test that decodes
// as a crew of version 1 did.
var readsConfig = readsConfigVersion

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
	if err := checkKeys(data); err != nil {
		return Config{}, err
	}
	if w.Version == nil {
		return Config{}, errors.New("no \"version\" field")
	}
	if !readsConfig(*w.Version) {
		return Config{}, fmt.Errorf("unknown config version %d (this crew reads versions 1 and %d)", *w.Version, ConfigVersion)
	}
	// A version 1 crew.json reads as the version crew writes: nothing in
	// it means anything else (the state root's upgrade reads the stored
	// version itself).
	cfg := Config{Version: ConfigVersion, MaximumInProgress: w.MaximumInProgress, Pools: w.Pools, Group: w.Group}
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

// checkKeys refuses, with its line and column, what encoding/json lets
// through silently: a key given twice in one object, at any depth (json
// keeps the last one), and a null value (json leaves the field as it was:
// a null cap reads as 0). crew never writes either. data is valid JSON.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	return walkJSON(dec, data, nil)
}

// walkJSON checks the value dec reads next; path is the keys leading to it.
func walkJSON(dec *json.Decoder, data []byte, path []string) error {
	before := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return positioned(data, err)
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, data, path)
	case json.Delim('['):
		for dec.More() {
			if err := walkJSON(dec, data, path); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case nil:
		if len(path) > 0 { // a null file is not a config object: said elsewhere
			return at(data, skipPunct(data, before), nullError(path))
		}
	}
	if err != nil {
		return positioned(data, err)
	}
	return nil
}

// walkObject checks an object's keys and values, its '{' read. The config
// object's own keys are fields, which encoding/json matches whatever
// their case, so there "retain" and "Retain" are the same key; the keys
// of pools are names, case and all.
func walkObject(dec *json.Decoder, data []byte, path []string) error {
	seen := map[string]int64{}
	for dec.More() {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return positioned(data, err)
		}
		key, _ := tok.(string)
		keyAt := skipPunct(data, before)
		same := key
		if len(path) == 0 {
			same = strings.ToLower(key)
		}
		if first, ok := seen[same]; ok {
			line, col := lineCol(data, first)
			return at(data, keyAt, fmt.Errorf("malformed config: %s is given twice (first at %d:%d); keep one",
				keyName(append(path, key)), line, col))
		}
		seen[same] = keyAt
		if err := walkJSON(dec, data, append(slices.Clip(path), key)); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return positioned(data, err)
	}
	return nil
}

// nullError says what belongs where crew.json holds a null.
func nullError(path []string) error {
	expected := map[string]string{
		"version":           "the config's version, 1",
		"maximumInProgress": "the number of slots, a whole number of at least 1",
		"pools":             "an object of pool names and caps (or leave it out for no pools)",
		"retain":            "a whole number of at least 1 (or leave it out to keep every finished run)",
		"retainFor":         `a duration such as "30d" (or leave it out to keep runs of any age)`,
		"logMax":            `a size such as "10MiB" (or leave it out for logs without a cap)`,
		"group":             "a group name (or leave it out)",
	}
	want, ok := expected[path[0]]
	switch {
	case len(path) == 2 && path[0] == "pools":
		want = "the pool's cap, a whole number of at least 1"
	case !ok || len(path) > 1:
		want = "a value (crew.json holds no nulls)"
	}
	return fmt.Errorf("malformed config: %s is null; it must be %s", keyName(path), want)
}

// keyName names a key by its path: "maximumInProgress", or "deploy" in "pools".
func keyName(path []string) string {
	name := strconv.Quote(path[len(path)-1])
	for i := len(path) - 2; i >= 0; i-- {
		name += " in " + strconv.Quote(path[i])
	}
	return name
}

// skipPunct is the offset of the first byte at or after off that is not
// space or the ',' and ':' between JSON tokens: where the next token starts.
func skipPunct(data []byte, off int64) int64 {
	for off < int64(len(data)) && strings.IndexByte(" \t\r\n,:", data[off]) >= 0 {
		off++
	}
	return off
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
	line, col := lineCol(data, off)
	return &SyntaxError{Line: line, Col: col, Err: err}
}

// lineCol is byte offset off of data as a 1-based line and column.
func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	return bytes.Count(before, []byte{'\n'}) + 1, int(off) - bytes.LastIndexByte(before, '\n')
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
