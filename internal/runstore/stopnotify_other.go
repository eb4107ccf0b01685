//go:build !linux

package runstore

import "os"

// notifier is Linux's inotify; elsewhere the StopWatch is polled.
type notifier struct{ changed chan struct{} }

func newNotifier(*os.Root) *notifier { return nil }

func (n *notifier) close() {}
