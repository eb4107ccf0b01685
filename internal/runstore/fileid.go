package runstore

import (
	"os"
	"syscall"

	"github.com/crew-dev/crew/internal/record"
)

// fileID is the device and inode of a file.
func fileID(fi os.FileInfo) record.FileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return record.FileID{}
	}
	return record.FileID{Dev: uint64(st.Dev), Ino: st.Ino} // Dev is int32 on darwin
}
