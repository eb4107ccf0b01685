// Package fdbudget says whether crew has the file descriptors it needs,
// counted before anything in the process opens one.
//
// Counting the limit (ulimit -n) is not enough: a parent can leave many
// descriptors open for crew to inherit, and then crew runs out halfway
// through its work. Worse, the Go runtime creates its poller (epoll and
// an eventfd on Linux, a kqueue on macOS) lazily, on the first file it
// opens or the first timer it sets; if that finds no descriptor free, the
// process dies with "fatal error: runtime: netpollinit failed", a crash
// crew cannot report. So this package counts the descriptors free in its
// init, and refuses there when not even crew's smallest need is met.
//
// The init runs before package os's (which may create the poller, for a
// standard stream inherited in non-blocking mode) because this package
// imports syscall only. Go initializes, at each step, the first package in
// import-path order whose imports are all initialized: this one is ready
// as soon as syscall is, before os (which imports syscall and more), and
// its path sorts before "os". Keep it that way (TestImportsOnlySyscall):
// any other import can make it wait for a package that sorts after "os",
// and then os's init comes first (golang.org/x/sys/unix did).
package fdbudget

import "syscall"

// Need is how many descriptors a crew command needs free. Measured on
// Linux (plain and -race builds alike) under `ulimit -n N`, with stdin,
// stdout, stderr and the Go runtime's own two (its cgroup's CPU limit
// files) open: `crew start` and a `start --wait` woken by a finishing run
// work from 14 free, `start --detach` from 16 (the handover pipe, the
// inherited locks), `status` and `recover` from 6. The margin covers what
// the measurement did not reach: a contended admission lock, reaping dead
// runs, more processes to watch; and `ulimit -n 32` with only those five
// open is enough. e2e/limits_test.go runs the hungriest paths with exactly
// this many free, so it fails when crew outgrows it.
const Need = 27

// Handed is how many descriptors crew hands to a detached supervisor, a
// crew process of its own (the run's two locks and the handover pipe:
// internal/supervise's fdOwner, fdSupervisor, fdReady).
// They were counted in the starting crew's Need, so the supervisor needs
// that many fewer free.
const Handed = 3

// Error is a process with fewer descriptors free than crew needs.
type Error struct {
	Limit uint64 // the soft RLIMIT_NOFILE (Go has raised it to the hard one)
	InUse int    // descriptors below Limit already open when crew started
	// Inherited is how many of them, besides stdin, stdout and stderr,
	// crew inherited from the process that started it (open without
	// close-on-exec: the runtime's own are close-on-exec).
	Inherited int
	Need      int // descriptors crew needs free
}

func (e *Error) Error() string {
	msg := "this process may open only " + itoa(e.Limit) + " files (ulimit -n) and " +
		itoa(uint64(e.InUse)) + " are already open"
	if e.Inherited > 0 {
		msg += ", " + itoa(uint64(e.Inherited)) + " of them inherited from the process that started crew"
	}
	msg += ", but crew needs " + itoa(uint64(e.Need)) + " free: raise the limit with `ulimit -n " +
		itoa(uint64(e.InUse+e.Need)) + "` (or more)"
	if e.Inherited > 0 {
		msg += ", or have that process close them (or open them close-on-exec),"
	}
	return msg + " and try again"
}

// count is what init saw: the soft limit, and how many descriptors were
// free, counted up to Need only (an exact count below that).
var count struct {
	ok    bool // counted: the limit was read and probing ended by EMFILE or at Need
	limit uint64
	free  int
}

func init() {
	count.limit, count.free, count.ok = measure(Need)
	if e := shortOf(Need - Handed); e != nil {
		// Nothing else has run yet (no os, no fmt): say it and leave,
		// before the runtime can die of it. The message names what a
		// command needs; only crew's own detached supervisor needs less.
		e.Need = Need
		_, _ = syscall.Write(2, []byte("crew: "+e.Error()+"\n"))
		syscall.Exit(125)
	}
}

// Check returns an *Error if fewer than need descriptors were free when
// crew started (need at most Need). It cannot tell when the limit could
// not be read or probing failed for another reason than the limit (a
// full system table: ENFILE): then it returns nil, and crew's own errors
// will say what ran out.
func Check(need int) error {
	if e := shortOf(need); e != nil {
		return e
	}
	return nil
}

// shortOf is Check's *Error, nil if need descriptors were free.
func shortOf(need int) *Error {
	if !count.ok || count.free >= need {
		return nil
	}
	// Probing ended by EMFILE: the limit is the kernel's bound on
	// descriptor numbers, so it is small enough to be an int.
	limit := int(count.limit)
	return &Error{Limit: count.limit, InUse: limit - count.free, Inherited: inherited(limit), Need: need}
}

// measure reads the soft limit and counts the descriptors free below it,
// up to upTo. Where /proc lists the open descriptors and leaves at least
// upTo below the limit free, that listing is the count (five system calls
// for the usual case of a high limit and a few inherited descriptors);
// otherwise the count is exact, by taking them (the kernel hands out the
// lowest free number below the limit) and giving them back: close to the
// limit only the kernel's own answer is to be trusted.
func measure(upTo int) (limit uint64, free int, ok bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, false
	}
	if open, listed := openBelow(rl.Cur); listed && rl.Cur >= uint64(open+upTo) {
		return rl.Cur, upTo, true
	}
	free, err := probe(upTo)
	if err != nil && err != syscall.EMFILE {
		return rl.Cur, free, false
	}
	return rl.Cur, free, true
}

// inherited counts the descriptors from 3 up to limit that are open
// without close-on-exec: those crew inherited (the Go runtime opens its own
// close-on-exec, and crew has opened none yet).
func inherited(limit int) int {
	n := 0
	for fd := 3; fd < limit; fd++ {
		// fcntl through syscall: golang.org/x/sys/unix imports
		// packages that sort after "os", so importing it would put
		// this package's init after os's.
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if errno == 0 && flags&syscall.FD_CLOEXEC == 0 {
			n++
		}
	}
	return n
}

// probe opens up to upTo descriptors, closes them, and returns how many it
// got and the error that stopped it (nil: it got upTo).
func probe(upTo int) (int, error) {
	if upTo <= 0 {
		return 0, nil
	}
	// No fork may copy the probes into a child meanwhile (a test binary
	// has other goroutines; crew's init has none).
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	first, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	fds := make([]int, 1, upTo)
	fds[0] = first
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	for len(fds) < upTo {
		fd, err := syscall.Dup(first)
		if err != nil {
			return len(fds), err
		}
		fds = append(fds, fd)
	}
	return len(fds), nil
}

// itoa formats n; strconv would be another import (see the package doc).
func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
