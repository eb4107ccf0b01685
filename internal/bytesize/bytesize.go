// Package bytesize parses and formats the sizes crew's flags and crew.json
// take: a number of bytes with an optional unit, binary (KiB, MiB, GiB,
// TiB: powers of 1024) or decimal (kB, MB, GB, TB: powers of 1000).
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Units.
const (
	KiB int64 = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

// Forms says what Parse accepts, for error messages.
const Forms = "a number of bytes with an optional unit, such as 65536, 512KiB, 10MiB, 1.5GiB (binary: KiB, MiB, GiB, TiB) or 10MB (decimal: kB, MB, GB, TB)"

var units = map[string]int64{
	"":    1,
	"b":   1,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// Error is a size that could not be parsed.
type Error struct {
	Input string
	Why   string
}

func (e *Error) Error() string {
	if e.Why == "" {
		return fmt.Sprintf("invalid size %q: use %s", e.Input, Forms)
	}
	return fmt.Sprintf("invalid size %q: %s", e.Input, e.Why)
}

// Parse parses a size: "1048576", "512KiB", "10MiB", "1.5GiB", "10MB".
// Units are case-insensitive; a space between number and unit is allowed.
// Single letters (K, M, G) are refused as ambiguous between binary and
// decimal, with a message that offers both.
func Parse(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	if strings.HasPrefix(s, "-") {
		return 0, &Error{Input: in, Why: "must not be negative"}
	}
	if num == "" {
		return 0, &Error{Input: in}
	}
	mult, ok := units[strings.ToLower(unit)]
	if !ok {
		switch strings.ToLower(unit) {
		case "k", "m", "g", "t":
			u := strings.ToUpper(unit)
			if u == "K" {
				return 0, &Error{Input: in, Why: fmt.Sprintf("say %sKiB (binary, 1024) or %skB (decimal, 1000)", num, num)}
			}
			return 0, &Error{Input: in, Why: fmt.Sprintf("say %s%siB (binary) or %s%sB (decimal)", num, u, num, u)}
		}
		return 0, &Error{Input: in, Why: fmt.Sprintf("unknown unit %q; use %s", unit, Forms)}
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n > math.MaxInt64/mult {
			return 0, &Error{Input: in, Why: "too large"}
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, &Error{Input: in, Why: "too large"}
		}
		return 0, &Error{Input: in}
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, &Error{Input: in, Why: "too large"}
	}
	return int64(math.Round(v)), nil
}

// Format renders n bytes for people: "512 B", "64 KiB", "1.5 MiB".
func Format(n int64) string {
	if n < KiB && n > -KiB {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n), ""
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= 1024
		unit = u
		if math.Abs(v) < 1024 {
			break
		}
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + unit
}

// Flag renders n the way Parse reads it, exactly: "10MiB" where n is a
// whole number of a binary unit, else the number of bytes.
func Flag(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if n != 0 && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}

// Value is a flag value (it satisfies pflag.Value) holding a size.
type Value struct{ p *int64 }

// NewValue returns a flag value that stores into p, set to def.
func NewValue(p *int64, def int64) *Value {
	*p = def
	return &Value{p: p}
}

func (v *Value) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return Flag(*v.p)
}

// Set parses s.
func (v *Value) Set(s string) error {
	n, err := Parse(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

// Type names the flag's type in usage messages.
func (v *Value) Type() string { return "size" }
