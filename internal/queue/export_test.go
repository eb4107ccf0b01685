package queue

// Die leaves w as a waiter killed while in line leaves its place: its
// files stay, its lock goes with it, and nothing removes them.
func Die(w *Waiter) {
	w.done = true // keep a cleanup's Remove from running
	_ = w.bell.Close()
	_ = w.lock.Release()
}
