package e2e

import (
	"syscall"
	"time"
)

func mtimeOf(st *syscall.Stat_t) time.Time { return time.Unix(st.Mtimespec.Unix()) }
func atimeOf(st *syscall.Stat_t) time.Time { return time.Unix(st.Atimespec.Unix()) }
