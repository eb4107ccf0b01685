package slotrec

import (
	"hash/crc32"
	"sync"
)

// The slots' CRC-32C. crc32.MakeTable(crc32.Castagnoli) is not used at
// package init, nor for a typical record: on a CPU with SSE 4.2 it builds
// the tables of the hardware path for long buffers, which took 0.12-0.15
// ms (GODEBUG=inittrace=1), the costliest init of any package crew links,
// paid by every crew process, most of which never read a record (issue
// 25). A record is a kilobyte or two; the 256-entry table below (1 KiB,
// built on first use in microseconds) checksums it in microseconds with
// crc32.Update's table-driven path. Records past bigRecord take the
// hardware path. Both compute the same CRC-32C (TestCastagnoliTable).

// bigRecord is the size from which a checksum is worth the hardware
// path's set-up.
const bigRecord = 64 << 10

var (
	smallTable = sync.OnceValue(func() *crc32.Table {
		var t crc32.Table
		for i := range t {
			crc := uint32(i)
			for range 8 {
				if crc&1 == 1 {
					crc = crc>>1 ^ crc32.Castagnoli
				} else {
					crc >>= 1
				}
			}
			t[i] = crc
		}
		return &t
	})
	bigTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })
)

// checksum is the CRC-32C of header followed by payload.
func checksum(header, payload []byte) uint32 {
	t := smallTable()
	if len(header)+len(payload) >= bigRecord {
		t = bigTable()
	}
	return crc32.Update(crc32.Update(0, t, header), t, payload)
}
