//go:build !failpoints

package failpoint

// Enabled is false: this binary has no failpoints.
const Enabled = false

// Hit does nothing in production builds.
func Hit(string) {}

// Skip is always false in production builds.
func Skip(string) bool { return false }

// Error is always nil in production builds.
func Error(string) error { return nil }
