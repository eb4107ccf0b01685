//go:build !linux && !darwin

package proc

// GroupHasOthers cannot tell here.
func GroupHasOthers(pgid, except int) (bool, error) { return false, ErrUnsupported }
