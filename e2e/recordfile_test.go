package e2e

// A run's record file as docs/state-root.md describes it, read and
// written the way an outsider (an operator, an older crew, an attacker)
// would: <id>.run, two slots of equal size, each
//
//	crew-run 2 seq=<16 hex> len=<8 hex> crc=<8 hex>\n<record JSON><padding>
//
// with a CRC-32C over the header up to " crc=" and the JSON; the valid
// slot with the higher seq is the record. <id>.json, a record an older
// crew wrote, is the JSON alone. This is a second implementation of the
// format, on purpose: crew's own (internal/slotrec) is checked against
// what the documentation says.

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

const slotMagic = "crew-run 2 "

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// activeRecordPath is the path of run id's record in runs/active: the one
// that exists, <id>.run if neither does.
func activeRecordPath(root, id string) string {
	return existingRecordPath(filepath.Join(root, "runs", "active"), id)
}

// doneRecordPath is the path of run id's finished record.
func doneRecordPath(t *testing.T, root, id string) string {
	return existingRecordPath(filepath.Join(root, "runs", "done", shardOf(t, id)), id)
}

func existingRecordPath(dir, id string) string {
	for _, ext := range []string{".run", ".json"} {
		if _, err := os.Lstat(filepath.Join(dir, id+ext)); err == nil {
			return filepath.Join(dir, id+ext)
		}
	}
	return filepath.Join(dir, id+".run")
}

// isRecordName reports whether name is a run's record file name, and
// the run id it names.
func recordIDOf(name string) (string, bool) {
	for _, ext := range []string{".run", ".json"} {
		if id, ok := cutSuffix(name, ext); ok {
			return id, true
		}
	}
	return "", false
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) < len(suffix) || s[len(s)-len(suffix):] != suffix {
		return s, false
	}
	return s[:len(s)-len(suffix)], true
}

// recordJSON is the record a record file holds (its newest valid slot),
// or an error saying why there is none.
func recordJSON(data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, []byte(slotMagic)) {
		return data, nil
	}
	if len(data)%2 != 0 || len(data) < 1024 {
		return nil, fmt.Errorf("a slot file of %d bytes", len(data))
	}
	size := len(data) / 2
	var best []byte
	var bestSeq uint64
	found := false
	for i := range 2 {
		payload, seq, ok := slotOf(data[i*size : (i+1)*size])
		if ok && (!found || seq > bestSeq) {
			best, bestSeq, found = payload, seq, true
		}
	}
	if !found {
		return nil, fmt.Errorf("no valid slot")
	}
	return best, nil
}

func slotOf(b []byte) (payload []byte, seq uint64, ok bool) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || !bytes.HasPrefix(b, []byte(slotMagic)) {
		return nil, 0, false
	}
	var n, crc uint64
	var seqHex, nHex, crcHex string
	if _, err := fmt.Sscanf(string(b[len(slotMagic):nl]), "seq=%s len=%s crc=%s", &seqHex, &nHex, &crcHex); err != nil {
		return nil, 0, false
	}
	var err error
	if seq, err = strconv.ParseUint(seqHex, 16, 64); err != nil {
		return nil, 0, false
	}
	if n, err = strconv.ParseUint(nHex, 16, 32); err != nil || nl+1+int(n) > len(b) {
		return nil, 0, false
	}
	if crc, err = strconv.ParseUint(crcHex, 16, 32); err != nil {
		return nil, 0, false
	}
	head := b[:bytes.Index(b, []byte(" crc="))]
	payload = b[nl+1 : nl+1+int(n)]
	if uint64(crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, payload)) != crc {
		return nil, 0, false
	}
	return payload, seq, true
}

// readRecordJSON reads the record at path.
func readRecordJSON(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	rec, err := recordJSON(data)
	require.NoError(t, err, "record file %s", path)
	return rec
}

// recordFile renders record JSON as a record file named like path: a
// slot file (one slot holding it at seq 1, the other blank) for <id>.run,
// the JSON itself for <id>.json.
func recordFile(path string, rec []byte) []byte {
	if _, ok := cutSuffix(path, ".run"); !ok {
		return rec
	}
	size := (len(slotMagic) + 45 + len(rec) + 1 + 1024 + 511) / 512 * 512
	head := fmt.Appendf(nil, "%sseq=%016x len=%08x", slotMagic, 1, len(rec))
	crc := crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, rec)
	slot := append(fmt.Appendf(head, " crc=%08x\n", crc), rec...)
	out := bytes.Repeat([]byte{' '}, 2*size)
	copy(out, slot)
	out[size-1], out[2*size-1] = '\n', '\n'
	return out
}

// writeRecordJSON writes record JSON at path as a record file.
func writeRecordJSON(t *testing.T, path string, rec []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, recordFile(path, rec), 0o600))
}
