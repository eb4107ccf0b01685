//go:build !linux

package proc

import "syscall"

// FindHolders cannot prove anything here.
func FindHolders(...FileID) (Scan, error) { return Scan{}, ErrUnsupported }

// Proc is never made here.
type Proc struct{}

// Pin cannot prove anything here.
func Pin(Holder) (*Proc, error) { return nil, ErrUnsupported }

// PID is 0: no Proc exists here.
func (p *Proc) PID() int { return 0 }

// Holds is false: no Proc exists here.
func (p *Proc) Holds() bool { return false }

// Group cannot tell here.
func (p *Proc) Group() (int, error) { return 0, ErrUnsupported }

// Signal refuses.
func (p *Proc) Signal(syscall.Signal) error { return ErrUnsupported }

// SignalGroup refuses.
func (p *Proc) SignalGroup(syscall.Signal, ...int) (int, error) { return 0, ErrUnsupported }

// Close does nothing.
func (p *Proc) Close() {}
