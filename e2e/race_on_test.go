//go:build race

package e2e

// raceEnabled builds the crew binary under test with -race too, so data
// races inside crew's own goroutines fail the suite.
const raceEnabled = true
