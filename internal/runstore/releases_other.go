//go:build !linux

package runstore

import "errors"

// watchReleases: this system has no inotify; waiters poll.
func (s *Store) watchReleases() (*ReleaseWatch, error) {
	return nil, errors.New("this system cannot watch the state root for releases")
}
