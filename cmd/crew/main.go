// Command crew runs commands under a machine-wide concurrency cap, without
// a daemon, and keeps a truthful record of every run.
//
// A supervisor may wait for hours on its command, so the runtime does not
// re-read the cgroup's CPU quota in the background to resize GOMAXPROCS:
// crew waits on files and processes, not on CPU.

//go:debug updatemaxprocs=0
package main

import "os"

func main() {
	if guardMain != nil && len(os.Args) == 2 && os.Args[1] == guardArg {
		os.Exit(guardMain()) // a run's lease guard (etcd store): no command line of crew's
	}
	code, intr := execute(os.Args[1:], streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	if intr != nil {
		intr.die() // returns only if the signal did not kill crew: then 128+N
	}
	os.Exit(code)
}
