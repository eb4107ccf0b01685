package main

// A run's record file as docs/state-root.md ("Record files") describes
// it: <run-id>.run, two slots of equal size, each
//
//	crew-run 2 seq=<16 hex> len=<8 hex> crc=<8 hex>\n<record JSON><spaces…>\n
//
// with a CRC-32C over the header up to " crc=" and the JSON; the valid slot
// with the higher seq is the record. The harness reads the records crew
// wrote (templates) and writes fixtures the way crew writes a new file:
// the record in the first slot, the second one blank.

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

const slotMagic = "crew-run 2 "

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordOfFile is the record JSON a record file holds.
func recordOfFile(data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, []byte(slotMagic)) || len(data)%2 != 0 {
		return nil, errors.New("not a record file (slots) of the documented format")
	}
	size := len(data) / 2
	var best []byte
	var bestSeq uint64
	found := false
	for i := range 2 {
		payload, seq, ok := slotPayload(data[i*size : (i+1)*size])
		if ok && (!found || seq > bestSeq) {
			best, bestSeq, found = payload, seq, true
		}
	}
	if !found {
		return nil, errors.New("no valid slot")
	}
	return best, nil
}

func slotPayload(b []byte) (payload []byte, seq uint64, ok bool) {
	nl := bytes.IndexByte(b, '\n')
	crcAt := bytes.Index(b, []byte(" crc="))
	lenAt := bytes.Index(b, []byte(" len="))
	if nl < 0 || crcAt < 0 || lenAt < 0 || !bytes.HasPrefix(b, []byte(slotMagic+"seq=")) || crcAt > nl {
		return nil, 0, false
	}
	seq, err1 := strconv.ParseUint(string(b[len(slotMagic)+4:lenAt]), 16, 64)
	n, err2 := strconv.ParseUint(string(b[lenAt+5:crcAt]), 16, 32)
	crc, err3 := strconv.ParseUint(string(b[crcAt+5:nl]), 16, 32)
	if err1 != nil || err2 != nil || err3 != nil || nl+1+int(n) > len(b) {
		return nil, 0, false
	}
	payload = b[nl+1 : nl+1+int(n)]
	if uint64(crc32.Update(crc32.Checksum(b[:crcAt], castagnoli), castagnoli, payload)) != crc {
		return nil, 0, false
	}
	return payload, seq, true
}

// recordFile renders record JSON as a new record file: the record in the
// first slot (seq 1), the second blank, each slot with 1 KiB of room,
// rounded up to 512 bytes.
func recordFile(rec []byte) []byte {
	head := fmt.Appendf(nil, "%sseq=%016x len=%08x", slotMagic, 1, len(rec))
	crc := crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, rec)
	slot := append(fmt.Appendf(head, " crc=%08x\n", crc), rec...)
	size := (len(slot) + 1 + 1024 + 511) / 512 * 512
	out := bytes.Repeat([]byte{' '}, 2*size)
	copy(out, slot)
	out[size-1], out[2*size-1] = '\n', '\n'
	return out
}
