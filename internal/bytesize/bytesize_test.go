package bytesize

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"65536", 65536},
		{"100B", 100},
		{"512KiB", 512 << 10},
		{"10MiB", 10 << 20},
		{"10mib", 10 << 20},
		{"10 MiB", 10 << 20},
		{"1.5GiB", 3 << 29},
		{"2TiB", 2 << 40},
		{"10MB", 10_000_000},
		{"10kB", 10_000},
		{"10KB", 10_000},
		{"1GB", 1_000_000_000},
		{"0.5KiB", 512},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `invalid size "": use a number of bytes with an optional unit, such as 65536, 512KiB, 10MiB`},
		{"big", `invalid size "big": use`},
		{"-1MiB", `invalid size "-1MiB": must not be negative`},
		{"10M", `invalid size "10M": say 10MiB (binary) or 10MB (decimal)`},
		{"10k", `invalid size "10k": say 10KiB (binary, 1024) or 10kB (decimal, 1000)`},
		{"10XB", `unknown unit "XB"`},
		{"1..5MiB", `invalid size "1..5MiB": use`},
		{"9999999TiB", "too large"},
		{"99999999999999999999", "too large"},
	} {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded; want %q", tc.in, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %q; want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		n          int64
		human, flg string
	}{
		{0, "0 B", "0"},
		{1000, "1000 B", "1000"},
		{1024, "1 KiB", "1KiB"},
		{3 << 19, "1.5 MiB", "1536KiB"},
		{1000 + 1, "1001 B", "1001"},
		{10 << 20, "10 MiB", "10MiB"},
		{5 << 30, "5 GiB", "5GiB"},
	} {
		if got := Format(tc.n); got != tc.human {
			t.Errorf("Format(%d) = %q; want %q", tc.n, got, tc.human)
		}
		if got := Flag(tc.n); got != tc.flg {
			t.Errorf("Flag(%d) = %q; want %q", tc.n, got, tc.flg)
		}
		if back, err := Parse(Flag(tc.n)); err != nil || back != tc.n {
			t.Errorf("Parse(Flag(%d)) = %d, %v", tc.n, back, err)
		}
	}
}
