package record

import (
	"strings"
	"testing"
)

// crew.json's "group" (crew init --group): kept through a round trip,
// absent when not shared, and refused when it cannot be a group name.
func TestConfigGroup(t *testing.T) {
	cfg, err := DecodeConfig([]byte(`{"version": 1, "maximumInProgress": 2, "group": "ci"}`))
	if err != nil || cfg.Group != "ci" {
		t.Fatalf("DecodeConfig = %+v, %v", cfg, err)
	}
	b, err := cfg.Encode()
	if err != nil || !strings.Contains(string(b), `"group": "ci"`) {
		t.Fatalf("Encode = %s, %v", b, err)
	}
	b, _ = DefaultConfig().Encode()
	if strings.Contains(string(b), "group") {
		t.Errorf("a private root's config names a group: %s", b)
	}
	for _, bad := range []string{"a b", "a:b", "a\u202eb"} {
		if _, err := DecodeConfig([]byte(`{"version": 1, "maximumInProgress": 2, "group": "` + bad + `"}`)); err == nil ||
			!strings.Contains(err.Error(), "is not a group name") {
			t.Errorf("group %q: %v", bad, err)
		}
	}
}
