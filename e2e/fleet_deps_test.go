//go:build etcd

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The fleet tests drive crew with an etcd store (build tag etcd): a
// binary of their own, never crewBin, which is built without the tag.
var etcdCrew struct {
	once sync.Once
	path string
	err  error
}

// crewEtcdBin builds crew with the etcd backend and failpoints (and
// -race when the tests run with it), once per test binary and only when
// a fleet test first asks, in binDir, which TestMain removes.
func crewEtcdBin(t testing.TB) string {
	t.Helper()
	etcdCrew.once.Do(func() {
		path := filepath.Join(binDir, "crew-etcd")
		args := []string{"build", "-tags", "etcd,failpoints", "-o", path}
		if raceEnabled {
			args = append(args, "-race")
		}
		build := exec.Command("go", append(args, "../cmd/crew")...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if etcdCrew.err = build.Run(); etcdCrew.err == nil {
			etcdCrew.path = path
		}
	})
	if etcdCrew.err != nil {
		t.Fatalf("build crew with -tags etcd: %v", etcdCrew.err)
	}
	return etcdCrew.path
}
