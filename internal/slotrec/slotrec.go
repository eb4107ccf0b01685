// Package slotrec is the on-disk format of a run record in the local
// store since state-root version 2 (`runs/active/<id>.run`, then
// `runs/done/<hour>/<id>.run`): one file of two slots of equal size, so
// that a record is updated in place, by one pwrite into an already
// allocated slot, rather than replaced through a new file (a creation, a
// rename and a freed inode per update).
//
// Each slot is a header line, the record's bytes and padding:
//
//	crew-run 2 seq=<16 hex> len=<8 hex> crc=<8 hex>\n<record><spaces…>\n
//
// The CRC-32C (Castagnoli) covers the header before "crc=" and the
// record, so a slot torn anywhere (a power loss in the middle of a
// pwrite), zeroed, or holding a stale header over new bytes is invalid.
// The valid slot with the higher sequence number is the record. A writer
// never writes into the slot that holds the newest durable record
// (Writer), so a torn write always leaves the previous durable record
// readable.
//
// The package knows nothing of what a record means: it stores bytes.
package slotrec

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Magic starts every slot; its version is the state root's record
// format, not the JSON record's own version.
const Magic = "crew-run 2 "

// headerLen is the fixed length of a slot's header line.
const headerLen = len(Magic) + len("seq=") + 16 + len(" len=") + 8 + len(" crc=") + 8 + 1

// crcAt is where the header's "crc=" field starts.
const crcAt = headerLen - 1 - 8 - len(" crc=")

// Align is the granularity of a slot's size: a sector, so that a torn
// write of one slot rewrites the other's sectors (if a block holds both)
// only with the bytes they already hold.
const Align = 512

// Margin is the room a new file leaves in each slot beyond its first
// record: a run's record grows (running, the end, retry attempts), and
// the final record must fit in the blocks allocated while the disk had
// room.
const Margin = 1024

// MinSlot and MaxSlot bound a slot's size when reading: a file outside
// them is not a record file crew made.
const (
	MinSlot = Align
	MaxSlot = 512 << 10
)

// ErrTooBig: the record does not fit in the file's slots; the file must
// be replaced by a bigger one (SlotSize, Encode).
var ErrTooBig = errors.New("record does not fit in its slot")

// IsSlotFile reports whether data looks like a slot file (its first
// slot's magic), rather than a v1 JSON record: the content, not the name,
// decides how a record is decoded.
func IsSlotFile(data []byte) bool { return bytes.HasPrefix(data, []byte(Magic)) }

// SlotSize is the slot size for a new file whose first record is n bytes:
// room for it, the header and Margin, rounded up to Align.
func SlotSize(n int) int {
	s := headerLen + n + 1 + Margin
	return (s + Align - 1) / Align * Align
}

// fits reports whether a record of n bytes fits a slot of size.
func fits(n, size int) bool { return headerLen+n+1 <= size }

// EncodeSlot renders one slot of size bytes holding payload at seq.
func EncodeSlot(payload []byte, seq uint64, size int) ([]byte, error) {
	if !fits(len(payload), size) {
		return nil, ErrTooBig
	}
	b := make([]byte, size)
	h := fmt.Appendf(b[:0], "%sseq=%016x len=%08x", Magic, seq, len(payload))
	crc := checksum(h, payload)
	h = fmt.Appendf(h, " crc=%08x\n", crc)
	if len(h) != headerLen {
		panic("slotrec: header length") // a programming error, caught by any test
	}
	n := copy(b[headerLen:], payload)
	for i := headerLen + n; i < size-1; i++ {
		b[i] = ' '
	}
	b[size-1] = '\n'
	return b, nil
}

// Encode renders a new file: payload in slot 0 at seq, and slot 1 empty
// (all padding, invalid), each of size bytes (0: SlotSize(len(payload))).
// Writing the whole file at creation allocates both slots' blocks.
func Encode(payload []byte, seq uint64, size int) ([]byte, error) {
	if size == 0 {
		size = SlotSize(len(payload))
	}
	s0, err := EncodeSlot(payload, seq, size)
	if err != nil {
		return nil, err
	}
	s1 := bytes.Repeat([]byte{' '}, size)
	s1[size-1] = '\n'
	return append(s0, s1...), nil
}

// Slot is what one slot holds, if it is valid.
type Slot struct {
	Valid   bool
	Seq     uint64
	Payload []byte
	Why     string // why it is not valid
}

// DecodeSlot reads one slot.
func DecodeSlot(b []byte) Slot {
	if len(b) < headerLen+1 {
		return Slot{Why: "shorter than a header"}
	}
	h := b[:headerLen]
	if !bytes.HasPrefix(h, []byte(Magic)) {
		if allZero(h) {
			return Slot{Why: "zeroed"}
		}
		return Slot{Why: "no slot header"}
	}
	f := h[len(Magic):]
	if !bytes.HasPrefix(f, []byte("seq=")) || string(f[20:25]) != " len=" || string(h[crcAt:crcAt+5]) != " crc=" || h[headerLen-1] != '\n' {
		return Slot{Why: "malformed slot header"}
	}
	seq, err1 := strconv.ParseUint(string(f[4:20]), 16, 64)
	n, err2 := strconv.ParseUint(string(f[25:33]), 16, 32)
	crc, err3 := strconv.ParseUint(string(h[crcAt+5:crcAt+13]), 16, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return Slot{Why: "malformed slot header"}
	}
	if !fits(int(n), len(b)) {
		return Slot{Why: fmt.Sprintf("says %d bytes, more than its slot holds", n)}
	}
	payload := b[headerLen : headerLen+int(n)]
	if got := checksum(h[:crcAt], payload); uint64(got) != crc {
		return Slot{Why: "checksum mismatch (torn or corrupt)"}
	}
	return Slot{Valid: true, Seq: seq, Payload: payload}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// File is a decoded slot file.
type File struct {
	SlotSize int
	Slots    [2]Slot
	Newest   int // the index of the valid slot with the higher seq
}

// Payload is the newest valid slot's record.
func (f *File) Payload() []byte { return f.Slots[f.Newest].Payload }

// Seq is the newest valid slot's sequence number.
func (f *File) Seq() uint64 { return f.Slots[f.Newest].Seq }

// Decode reads a whole slot file. It is an error when the file's size is
// not that of two slots, or when neither slot is valid.
func Decode(data []byte) (*File, error) {
	if len(data)%2 != 0 || len(data)/2 < MinSlot || len(data)/2 > MaxSlot || (len(data)/2)%Align != 0 {
		return nil, fmt.Errorf("a slot record file of %d bytes: not two slots of a multiple of %d bytes", len(data), Align)
	}
	size := len(data) / 2
	f := &File{SlotSize: size}
	f.Slots[0] = DecodeSlot(data[:size])
	f.Slots[1] = DecodeSlot(data[size:])
	switch a, b := f.Slots[0], f.Slots[1]; {
	case a.Valid && b.Valid:
		if b.Seq > a.Seq {
			f.Newest = 1
		}
	case a.Valid:
	case b.Valid:
		f.Newest = 1
	default:
		return nil, fmt.Errorf("no valid slot (slot 0: %s; slot 1: %s)", a.Why, b.Why)
	}
	return f, nil
}

// Storage is what a Writer writes through: an open record file.
type Storage interface {
	WriteAt(b []byte, off int64) (int, error)
	Sync() error
}

// Writer updates a slot file in place. It knows which slot holds the
// newest durable record and never writes there: an update goes into the
// other slot, and becomes the durable one only once it is synced. So a
// crash at any moment leaves the newest durable record readable, plus at
// most a newer one.
type Writer struct {
	f       Storage
	size    int
	durable int    // the slot holding the newest durable record
	seq     uint64 // the highest sequence number written
	dirty   bool   // the other slot holds a newer record, not synced
}

// NewWriter writes into f, a file of slots of size bytes whose slot
// durable holds its newest durable record, at sequence seq (the highest
// in the file).
func NewWriter(f Storage, size, durable int, seq uint64) *Writer {
	return &Writer{f: f, size: size, durable: durable, seq: seq}
}

// SlotSize is the size of each of the file's slots.
func (w *Writer) SlotSize() int { return w.size }

// Seq is the highest sequence number written.
func (w *Writer) Seq() uint64 { return w.seq }

// Fits reports whether a record of n bytes fits a slot.
func (w *Writer) Fits(n int) bool { return fits(n, w.size) }

// Write writes payload into the slot that does not hold the newest
// durable record; with sync, fsyncs the file, after which that slot is
// the durable one. ErrTooBig: it does not fit (nothing was written).
func (w *Writer) Write(payload []byte, sync bool) error {
	target := 1 - w.durable
	b, err := EncodeSlot(payload, w.seq+1, w.size)
	if err != nil {
		return err
	}
	w.seq++
	w.dirty = true
	if _, err := w.f.WriteAt(b, int64(target*w.size)); err != nil {
		return err
	}
	if !sync {
		return nil
	}
	return w.Sync()
}

// Sync makes the newest record written durable, if it is not yet: after
// it, that slot is the durable one.
func (w *Writer) Sync() error {
	if !w.dirty {
		return nil
	}
	if err := w.f.Sync(); err != nil {
		return err
	}
	w.durable, w.dirty = 1-w.durable, false
	return nil
}
