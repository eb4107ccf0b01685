// Package lockfs holds kernel file locks (flock(2)) on files inside an
// *os.Root that package runstore names. A flock belongs to an open file
// description: it dies with the last descriptor that refers to it, so a
// lock held by a process that is gone releases itself, and a descriptor
// handed to a child keeps the lock for as long as the child lives.
//
// Lock files are opened through package rootfs: regular files only, never
// through a symbolic link, never blocking.
package lockfs
