package slotrec

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCastagnoliTable: the table built on first use is the standard
// library's CRC-32C table, and checksum computes CRC-32C on both of its
// paths, so slots written before and after this table agree.
func TestCastagnoliTable(t *testing.T) {
	std := crc32.MakeTable(crc32.Castagnoli)
	require.Equal(t, *std, *smallTable(), "the small table is not CRC-32C's")
	require.Equal(t, uint32(0xe3069283), checksum([]byte("1234"), []byte("56789")), "the CRC-32C check value")

	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 100, 2048 - headerLen, bigRecord - 1, bigRecord, 3 * bigRecord} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		cut := n / 3
		require.Equal(t, crc32.Checksum(b, std), checksum(b[:cut], b[cut:]), "%d bytes", n)
	}
}
