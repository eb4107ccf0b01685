package record

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
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

// Retention and the log cap are optional fields of version 1: absent, the
// config keeps everything; present, they round-trip as the text they are.
func TestConfigRetentionFields(t *testing.T) {
	cfg, err := DecodeConfig([]byte(`{"version":1,"maximumInProgress":2}`))
	if err != nil || !cfg.KeepsEverything() || cfg.LogMax != 0 {
		t.Fatalf("a config without retention: %+v, %v", cfg, err)
	}
	b, _ := cfg.Encode()
	if strings.Contains(string(b), "retain") || strings.Contains(string(b), "logMax") {
		t.Errorf("unset fields are written: %s", b)
	}
	cfg, err = DecodeConfig([]byte(`{"version":1,"maximumInProgress":2,"retain":20,"retainFor":"30d","logMax":"10MiB"}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Retain != 20 || cfg.RetainFor != 30*24*time.Hour || cfg.LogMax != 10<<20 || cfg.KeepsEverything() {
		t.Fatalf("decoded %+v", cfg)
	}
	b, _ = cfg.Encode()
	for _, want := range []string{`"retain": 20`, `"retainFor": "30d"`, `"logMax": "10MiB"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("encoded config lacks %s: %s", want, b)
		}
	}
	back, err := DecodeConfig(b)
	if err != nil || !reflect.DeepEqual(back, cfg) {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, cfg)
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
		{"version 3", `{"version":3,"maximumInProgress":2}`, "unknown config version 3"},
		{"version string", `{"version":"1","maximumInProgress":2}`, "malformed JSON"},
		{"unknown field", `{"version":1,"maximumInProgress":2,"maxInProgress":8}`, "unknown field"},
		{"misspelt field", `{"version":1,"maximumInProgres":8}`, "unknown field"},
		{"max string", `{"version":1,"maximumInProgress":"2"}`, "malformed config"},
		{"max float", `{"version":1,"maximumInProgress":2.5}`, "malformed config"},
		{"max missing", `{"version":1}`, "maximumInProgress is 0"},
		{"max 0", `{"version":1,"maximumInProgress":0}`, "maximumInProgress is 0"},
		{"max negative", `{"version":1,"maximumInProgress":-3}`, "maximumInProgress is -3"},
		{"retain 0", `{"version":1,"maximumInProgress":2,"retain":0}`, "retain is 0; it must be at least 1"},
		{"retain negative", `{"version":1,"maximumInProgress":2,"retain":-5}`, "retain is -5; it must be at least 1"},
		{"retain string", `{"version":1,"maximumInProgress":2,"retain":"5"}`, `"retain" is a JSON string`},
		{"retainFor bad", `{"version":1,"maximumInProgress":2,"retainFor":"a month"}`, `retainFor: invalid duration "a month"`},
		{"retainFor number", `{"version":1,"maximumInProgress":2,"retainFor":30}`, `"retainFor" is a JSON number`},
		{"retainFor negative", `{"version":1,"maximumInProgress":2,"retainFor":"-1d"}`, `retainFor is "-1d"; it must be positive`},
		{"retainFor zero", `{"version":1,"maximumInProgress":2,"retainFor":"0"}`, `retainFor is "0"; it must be positive`},
		{"logMax bad", `{"version":1,"maximumInProgress":2,"logMax":"10M"}`, `logMax: invalid size "10M": say 10MiB (binary) or 10MB (decimal)`},
		{"logMax small", `{"version":1,"maximumInProgress":2,"logMax":"1KiB"}`, `logMax is "1KiB"; it must be at least 64KiB`},
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

// Issue 23, item 13b and c: a null where a value belongs read as its zero
// ("maximumInProgress is 0"), and a key given twice, at any depth, was
// taken as its last value. Both are refused, pointing at the place.
func TestDecodeConfigNullsAndDuplicates(t *testing.T) {
	tests := []struct {
		data      string
		line, col int
		at        string // what is there
		want      string
	}{
		{"{\n  \"version\": 1,\n  \"maximumInProgress\": null\n}\n", 3, 24, "n",
			`"maximumInProgress" is null; it must be the number of slots, a whole number of at least 1`},
		{`{"version":null,"maximumInProgress":2}`, 1, 12, "n", `"version" is null; it must be the config's version, 1`},
		{`{"version":1,"maximumInProgress":2,"pools":{"deploy":null}}`, 1, 54, "n",
			`"deploy" in "pools" is null; it must be the pool's cap, a whole number of at least 1`},
		{`{"version":1,"maximumInProgress":2,"pools":null}`, 1, 44, "n", `"pools" is null; it must be an object of pool names and caps`},
		{`{"version":1,"maximumInProgress":2,"retain":null}`, 1, 45, "n", `"retain" is null; it must be a whole number of at least 1 (or leave it out`},
		{`{"version":1,"maximumInProgress":2,"retainFor" : null}`, 1, 50, "n", `"retainFor" is null; it must be a duration`},
		{`{"version":1,"maximumInProgress":2,"logMax":null}`, 1, 45, "n", `"logMax" is null; it must be a size`},
		{`{"version":1,"maximumInProgress":2,"group":null}`, 1, 44, "n", `"group" is null`},
		{"{\n  \"version\": 1,\n  \"maximumInProgress\": 2,\n  \"maximumInProgress\": 8\n}\n", 4, 3, `"`,
			`"maximumInProgress" is given twice (first at 3:3); keep one`},
		{`{"version":1,"maximumInProgress":2,"pools":{"a":1,"b":1,"a":2}}`, 1, 57, `"`,
			`"a" in "pools" is given twice (first at 1:45); keep one`},
		{`{"version":1,"maximumInProgress":2,"pools":{"a":1},"pools":{"b":1}}`, 1, 52, `"`, `"pools" is given twice (first at 1:36)`},
		{`{"version":1,"maximumInProgress":2,"MaximumInProgress":3}`, 1, 36, `"`,
			`"MaximumInProgress" is given twice (first at 1:14)`}, // encoding/json takes either case
		{`{"version":1,"maximumInProgress":2,"pools":{"\u0061":1,"a":2}}`, 1, 56, `"`, `"a" in "pools" is given twice`},
	}
	for _, tc := range tests {
		_, err := DecodeConfig([]byte(tc.data))
		var syn *SyntaxError
		if !errors.As(err, &syn) {
			t.Errorf("DecodeConfig(%q) = %v, want a *SyntaxError", tc.data, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), fmt.Sprintf("%d:%d: malformed config: ", tc.line, tc.col)) {
			t.Errorf("DecodeConfig(%q) = %q, want %d:%d: ...%s", tc.data, err, tc.line, tc.col, tc.want)
			continue
		}
		if got := strings.Split(tc.data, "\n")[tc.line-1][tc.col-1 : tc.col]; got != tc.at {
			t.Errorf("DecodeConfig(%q) points at %q, want %q", tc.data, got, tc.at)
		}
	}
	// Pools that differ in case are different pools; repeated values are fine.
	cfg, err := DecodeConfig([]byte(`{"version":1,"maximumInProgress":4,"pools":{"a":1,"A":1}}`))
	if err != nil || len(cfg.Pools) != 2 {
		t.Errorf("pools a and A: %+v, %v", cfg, err)
	}
}

// A crew that reads only version 1 (every crew before state-root version
// 2) refuses what this crew writes, with the message its user sees:
// that is what keeps it, blind to <id>.run records, off an upgraded root.
func TestVersion1CrewRefusesThisCrewsConfig(t *testing.T) {
	b, err := DefaultConfig().Encode()
	if err != nil {
		t.Fatal(err)
	}
	defer func(old func(int) bool) { readsConfig = old }(readsConfig)
	readsConfig = func(v int) bool { return v == 1 }
	_, err = DecodeConfig(b)
	if err == nil || !strings.Contains(err.Error(), "unknown config version 2") {
		t.Fatalf("a version 1 crew decoding %s: %v", b, err)
	}
}

func TestConfigVersion1ReadsAsCurrent(t *testing.T) {
	cfg, err := DecodeConfig([]byte(`{"version":1,"maximumInProgress":3}`))
	if err != nil || cfg.Version != ConfigVersion || cfg.MaximumInProgress != 3 {
		t.Fatalf("%+v, %v", cfg, err)
	}
	b, _ := cfg.Encode()
	if !strings.Contains(string(b), `"version": 2`) {
		t.Fatalf("written as %s", b)
	}
}

// The etcd store keeps writing version 1 (its records did not change):
// a crew that reads only version 1 reads it.
func TestVersion1CrewReadsTheEtcdStoresConfig(t *testing.T) {
	b, err := DefaultConfig().EncodeVersion(V1)
	if err != nil {
		t.Fatal(err)
	}
	defer func(old func(int) bool) { readsConfig = old }(readsConfig)
	readsConfig = func(v int) bool { return v == 1 }
	if _, err := DecodeConfig(b); err != nil {
		t.Fatalf("a version 1 crew decoding %s: %v", b, err)
	}
}
