// Package record defines what crew stores about runs, independent of where
// it is stored: run ids, run records and their states, queue tickets, the
// config, task names, and the liveness vocabulary every backend reports in.
//
// It does no I/O. The local state root (package runstore) and any other
// backend encode and decode these types; the admission policy (package
// admission) decides on them.
package record
