// Package failpoint lets tests stop or kill a crew process at a named step
// of admission, launch and finalization, to force interleavings and crashes
// instead of hoping for them.
//
// Failpoints exist only in binaries built with `-tags failpoints`; in every
// other build Hit and Skip are empty functions the compiler removes.
//
// CREW_FAILPOINT holds comma-separated rules:
//
//	<name>:kill          SIGKILL this process at that step
//	<name>:wait:<path>   create <path>.reached, then block until <path> exists
//	<name>:panic         panic at that step (an internal error)
//	<name>:error:<ERRNO>[:<path>]
//	                     make that step fail with ERRNO (ENOSPC, EACCES,
//	                     EMFILE, ...), until <path> exists if given
//	<name>:skip          for steps that guard a mechanism (admission-lock):
//	                     skip it, so tests can prove they catch its absence
package failpoint
