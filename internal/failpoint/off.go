//go:build !failpoints

package failpoint

// Enabled is false: this binary has no failpoints.
const Enabled = false

// Hit does nothing in production builds.
func Hit(Name) {}

// Skip is always false in production builds.
func Skip(Name) bool { return false }

// Error is always nil in production builds.
func Error(Name) error { return nil }
