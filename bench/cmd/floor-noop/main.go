// Command floor-noop is a Go program that does nothing: the harness
// builds it static (as crew is built) and times it as the cost of
// starting and ending any Go process on this machine.
package main

func main() {}
