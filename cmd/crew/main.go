// Command crew runs commands under a machine-wide concurrency cap, without
// a daemon, and keeps a truthful record of every run.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
