package duration

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"90s", 90 * time.Second},
		{"10m", 10 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"500ms", 500 * time.Millisecond},
		{"7d", 7 * Day},
		{"30d", 30 * Day},
		{"1d12h", 36 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"2d3h4m5s", 2*Day + 3*time.Hour + 4*time.Minute + 5*time.Second},
		{"-2d", -2 * Day},
		{"+1d", Day},
		{"0d", 0},
		{"1h1d", 25 * time.Hour},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `invalid duration "": use a number and a unit, such as 90s, 10m, 1h30m, 7d or 1d12h`},
		{"abc", `invalid duration "abc": use a number and a unit`},
		{"10", `invalid duration "10": 10 has no unit`},
		{"5w", `invalid duration "5w": unknown unit "w"`},
		{"1y", `unknown unit "y"`},
		{"7 d", `unknown unit " d"`},
		{"d", `invalid duration "d": use`},
		{"-", `invalid duration "-": use`},
		{"1..5d", `invalid duration "1..5d": use`},
		{"200000d", "too long"},
		{"100000d100000d", "too long"},
		{"9999999999h", `invalid duration "9999999999h"`},
	} {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded; want an error containing %q", tc.in, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %q; want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestFormatRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{30 * Day, "30d"},
		{36 * time.Hour, "1d12h"},
		{90 * time.Minute, "1h30m"},
		{2 * time.Hour, "2h"},
		{time.Minute, "1m"},
		{90 * time.Second, "1m30s"},
		{500 * time.Millisecond, "500ms"},
		{Day + time.Second, "1d1s"},
		{-Day, "-1d"},
	} {
		got := Format(tc.d)
		if got != tc.want {
			t.Errorf("Format(%v) = %q; want %q", tc.d, got, tc.want)
		}
		back, err := Parse(got)
		if err != nil || back != tc.d {
			t.Errorf("Parse(Format(%v)) = %v, %v", tc.d, back, err)
		}
	}
}

func TestValue(t *testing.T) {
	var d time.Duration
	v := NewValue(&d, 10*time.Second)
	if d != 10*time.Second || v.String() != "10s" || v.Type() != "duration" {
		t.Fatalf("default: %v %q %q", d, v.String(), v.Type())
	}
	if err := v.Set("1d12h"); err != nil || d != 36*time.Hour {
		t.Fatalf("Set: %v %v", d, err)
	}
	err := v.Set("soon")
	var derr *Error
	if !errors.As(err, &derr) || derr.Input != "soon" {
		t.Fatalf("Set(soon) = %v, want a *Error for the command line to phrase", err)
	}
	if d != 36*time.Hour {
		t.Fatalf("a failed Set changed the value to %v", d)
	}
}
