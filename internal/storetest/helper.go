package storetest

import (
	"bufio"
	"fmt"
	"os"
	"sync"
)

// A Waiter is a place in a state root's queue: queue.Waiter.
type Waiter interface {
	Rung() <-chan struct{}
	Remove()
}

// WaitInLine is the helper process of a waiting start (see package
// helperproc): it prints "queued", then "rung" whenever w is woken, and
// leaves the queue ("removed") when the test sends "remove"; it returns
// when the test closes its stdin.
func WaitInLine(w Waiter) int {
	var mu sync.Mutex // stdout lines must not interleave
	println := func(s string) { mu.Lock(); fmt.Println(s); mu.Unlock() }
	go func() {
		for range w.Rung() {
			println("rung")
		}
	}()
	println("queued")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "remove" {
			w.Remove()
			println("removed")
		}
	}
	return 0
}
