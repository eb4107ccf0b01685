// Package lockfs owns crew's kernel file locks: the admission lock that
// serializes every admission decision on a machine, and the per-run owner
// locks that prove a run still has a living process.
//
// Every lock here is a flock(2) lock. It belongs to an open file
// description, so it dies with the last process holding that description:
// a killed holder can never leave a stale lock behind, and no lock is ever
// reclaimed by age.
package lockfs
