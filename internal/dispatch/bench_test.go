package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/crew-dev/crew/internal/dispatch"
	"github.com/crew-dev/crew/internal/vocab"
)

// BenchmarkAdmissionScan is one pass through the admission critical
// section with n living runs in the active set: lock, read and probe the
// active set and the queue, decide. The start is refused (its task is
// running), so no reservation is written and no fsync is timed.
func BenchmarkAdmissionScan(b *testing.B) {
	for _, n := range []int{1, 200} {
		b.Run(fmt.Sprintf("active=%d", n), func(b *testing.B) {
			d := dispatch.New(b.TempDir() + "/state")
			if _, err := d.Admin().Init(n+1, true, nil, 0); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				res, err := d.Admit(context.Background(), admitReq(fmt.Sprintf("t%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(res.Run.Release)
			}
			b.ResetTimer()
			for b.Loop() {
				_, err := d.Admit(context.Background(), admitReq("t0"))
				var refused *vocab.RefusedError
				if !errors.As(err, &refused) {
					b.Fatalf("Admit = %v, want a refusal", err)
				}
			}
		})
	}
}
