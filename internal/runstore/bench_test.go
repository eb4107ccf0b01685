package runstore

import (
	"os"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/record"
)

// BenchmarkListActive shows that admission's read (ListActive) costs the
// same whatever the history: 8 active runs, with 0 or 10,000 finished
// runs spread over 100 shards. ns/op should not move between the two.
func BenchmarkListActive(b *testing.B) {
	for _, history := range []int{0, 10000} {
		b.Run(map[int]string{0: "history=0", 10000: "history=10000"}[history], func(b *testing.B) {
			s := newStore(b)
			base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
			// History: written directly (no fsync) to keep setup fast.
			for i := range history {
				id := idAt(base.Add(time.Duration(i%100)*time.Hour+time.Duration(i)*time.Millisecond), i)
				data, err := testRecord(id, record.Succeeded).Encode()
				if err != nil {
					b.Fatal(err)
				}
				if i < 100 { // first pass over the 100 shards
					if err := os.MkdirAll(s.osPath(shardDir(id)), DirPerm); err != nil {
						b.Fatal(err)
					}
				}
				if err := os.WriteFile(s.DonePath(id), data, FilePerm); err != nil {
					b.Fatal(err)
				}
			}
			now := base.Add(200 * 24 * time.Hour)
			for i := range 8 {
				mustWriteActive(b, s, testRecord(idAt(now.Add(time.Duration(i)), i), record.Running))
			}
			if history > 0 {
				shards, _ := os.ReadDir(s.osPath(doneDir))
				n := 0
				for _, d := range shards {
					names, _ := os.ReadDir(s.osPath(doneDir, d.Name()))
					n += len(names)
				}
				if n != history || len(shards) != 100 {
					b.Fatalf("fixture has %d finished records in %d shards, want %d in 100", n, len(shards), history)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				ents, err := s.ListActive()
				if err != nil || len(ents) != 8 {
					b.Fatalf("ListActive = %d entries, %v", len(ents), err)
				}
				for _, e := range ents {
					if e.Err != nil || e.Finished {
						b.Fatalf("entry %+v", e)
					}
				}
			}
		})
	}
}
