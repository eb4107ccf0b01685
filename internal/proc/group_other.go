//go:build !linux && !darwin

package proc

// GroupHasOthers cannot tell here.
func GroupHasOthers(pgid int, except ...int) (bool, error) { return false, ErrUnsupported }
