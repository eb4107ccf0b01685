package supervise

import (
	"bytes"
	"testing"
)

func TestCRLFWriter(t *testing.T) {
	cases := []struct {
		name   string
		writes []string
		want   string
	}{
		{"lines", []string{"a\r\nb\r\n"}, "a\nb\n"},
		{"a progress bar keeps its returns", []string{"10%\r20%\r\n"}, "10%\r20%\n"},
		{"a pair split across writes", []string{"a\r", "\nb\r", "\r\n"}, "a\nb\r\n"},
		{"a return held, then something else", []string{"x\r", "y"}, "x\ry"},
		{"a return at the very end is flushed", []string{"done\r"}, "done\r"},
		{"an empty write between", []string{"a\r", "", "\n"}, "a\n"},
		{"bare newlines pass", []string{"a\nb\n"}, "a\nb\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			w := &crlfWriter{w: &out}
			for _, s := range c.writes {
				n, err := w.Write([]byte(s))
				if err != nil || n != len(s) {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != c.want {
				t.Fatalf("log got %q, want %q", out.String(), c.want)
			}
		})
	}
}
