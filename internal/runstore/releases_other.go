//go:build !linux

package runstore

import (
	"errors"

	"github.com/crew-dev/crew/internal/record"
)

// watchReleases: this system has no inotify; waiters poll.
func (s *Store) watchReleases(record.RunID) (*ReleaseWatch, error) {
	return nil, errors.New("this system cannot watch the state root for releases")
}
