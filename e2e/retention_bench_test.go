package e2e

import (
	"fmt"
	"io"
	"strconv"
	"testing"
)

// BenchmarkStartTrueRetained is BenchmarkStartTrue on a state root that
// keeps the newest 20 runs: every start's finish prunes one run lazily.
// The difference between the two is what a lazy prune adds to a start.
func BenchmarkStartTrueRetained(b *testing.B) {
	e := benchEnv(b)
	e.benchRun(b, "init", "--retain", "20")
	for i := range 21 {
		e.benchRun(b, "start", fmt.Sprintf("warm%d", i), "--", "true")
	}
	b.ResetTimer()
	for range b.N {
		e.benchRun(b, "start", "t", "--", "true")
	}
}

// BenchmarkOutputThroughCrew is 50 MiB of output through crew start to a
// reader, with the log uncapped and capped: what the cap costs (or saves)
// the whole path, command to terminal.
func BenchmarkOutputThroughCrew(b *testing.B) {
	const lines = 50 << 20 / 16
	for _, logMax := range []string{"0", "1MiB"} {
		b.Run("log-max="+logMax, func(b *testing.B) {
			e := benchEnv(b)
			b.SetBytes(50 << 20)
			for range b.N {
				cmd := e.crew("start", "--log-max", logMax, "big", "--", "seq", "-f", "line %010.0f", "1", strconv.Itoa(lines))
				out, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, out)
				if err := cmd.Wait(); err != nil || n != 50<<20 {
					b.Fatalf("%d bytes, %v", n, err)
				}
				b.StopTimer()
				e.benchRun(b, "prune", "--keep", "0")
				b.StartTimer()
			}
		})
	}
}
