package stateroot_test

import (
	"testing"

	"github.com/crew-dev/crew/internal/stateroot"
)

func TestIsTempName(t *testing.T) {
	tests := map[string]bool{
		"":  false,
		"a": false,
		"r-20240102T030405.000000006Z-0123456789abcdef.json":            false,
		".r-20240102T030405.000000006Z-0123456789abcdef.json1234567890": true,
		".":          true,
		"..":         true,
		".crew.json": true,
		".hidden":    true,
		"a.json":     false,
	}
	for name, want := range tests {
		if got := stateroot.IsTempName(name); got != want {
			t.Errorf("IsTempName(%q) = %v, want %v", name, got, want)
		}
	}
}
