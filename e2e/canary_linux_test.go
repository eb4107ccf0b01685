package e2e

import (
	"syscall"
	"time"
)

func mtimeOf(st *syscall.Stat_t) time.Time { return time.Unix(st.Mtim.Unix()) }
func atimeOf(st *syscall.Stat_t) time.Time { return time.Unix(st.Atim.Unix()) }
