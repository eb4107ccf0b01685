package slotrec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// mem is a Storage in memory that remembers what was synced, so a test
// can crash it: Crash keeps the synced bytes and tears the rest.
type mem struct {
	b, synced []byte
	syncs     int
}

func (m *mem) WriteAt(b []byte, off int64) (int, error) {
	copy(m.b[off:], b)
	return len(b), nil
}
func (m *mem) Sync() error { m.synced = bytes.Clone(m.b); m.syncs++; return nil }

func newMem(t *testing.T, payload string) (*mem, *Writer) {
	t.Helper()
	data, err := Encode([]byte(payload), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := &mem{b: data, synced: bytes.Clone(data)}
	return m, NewWriter(m, len(data)/2, 0, 1)
}

func decodeString(t *testing.T, data []byte) (string, uint64) {
	t.Helper()
	f, err := Decode(data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return string(f.Payload()), f.Seq()
}

func TestNewFileHoldsFirstRecordWithRoom(t *testing.T) {
	data, err := Encode([]byte(`{"a":1}`), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(data)%(2*Align) != 0 || len(data)/2 < headerLen+7+Margin {
		t.Fatalf("file of %d bytes: slots not aligned or without margin", len(data))
	}
	if got, seq := decodeString(t, data); got != `{"a":1}` || seq != 1 {
		t.Fatalf("got %q seq %d", got, seq)
	}
	f, _ := Decode(data)
	if f.Slots[1].Valid {
		t.Fatal("the empty slot decodes as valid")
	}
}

func TestBothValidHigherSeqWins(t *testing.T) {
	m, w := newMem(t, "one")
	if err := w.Write([]byte("two"), false); err != nil {
		t.Fatal(err)
	}
	if got, seq := decodeString(t, m.b); got != "two" || seq != 2 {
		t.Fatalf("got %q seq %d, want two 2", got, seq)
	}
	if err := w.Write([]byte("three"), true); err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]byte("four"), false); err != nil {
		t.Fatal(err)
	}
	f, _ := Decode(m.b)
	if !f.Slots[0].Valid || !f.Slots[1].Valid || string(f.Payload()) != "four" || f.Newest != 0 {
		t.Fatalf("newest %d %q; slots %+v", f.Newest, f.Payload(), f.Slots)
	}
	// Seq, not position, decides: swap the slots.
	size := f.SlotSize
	swapped := append(bytes.Clone(m.b[size:]), m.b[:size]...)
	if got, _ := decodeString(t, swapped); got != "four" {
		t.Fatalf("swapped slots: got %q", got)
	}
}

// The rule that keeps a crash safe: an unsynced write never goes into
// the slot of the newest durable record, however many follow each other.
func TestWritesNeverTouchTheDurableSlot(t *testing.T) {
	m, w := newMem(t, "provisioning")
	for i, p := range []string{"running", "running, attempt 2", "running, attempt 3"} {
		if err := w.Write([]byte(p), false); err != nil {
			t.Fatal(err)
		}
		// Tear the slot just written (zero it from the middle of its
		// record on): what was synced still decodes.
		torn := bytes.Clone(m.b)
		for j := w.SlotSize() + headerLen + len(p)/2; j < len(torn); j++ {
			torn[j] = 0
		}
		if got, _ := decodeString(t, torn); got != "provisioning" {
			t.Fatalf("write %d torn: got %q, want the durable provisioning record", i, got)
		}
		if got, _ := decodeString(t, m.synced); got != "provisioning" {
			t.Fatalf("write %d: the synced file says %q", i, got)
		}
	}
	if err := w.Write([]byte("final"), true); err != nil {
		t.Fatal(err)
	}
	if got, _ := decodeString(t, m.synced); got != "final" {
		t.Fatalf("after the sync: %q", got)
	}
	// The next write goes into slot 0 now, and leaves "final" alone.
	if err := w.Write([]byte("after"), false); err != nil {
		t.Fatal(err)
	}
	size := w.SlotSize()
	for i := range size {
		m.b[i] = 0
	}
	if got, _ := decodeString(t, m.b); got != "final" {
		t.Fatalf("after zeroing the slot written last: %q", got)
	}
}

func TestTornSlotIsInvalid(t *testing.T) {
	m, w := newMem(t, "provisioning")
	if err := w.Write([]byte(strings.Repeat("r", 300)), false); err != nil {
		t.Fatal(err)
	}
	size := w.SlotSize()
	newer := m.b[size:]
	// Every cut of the new slot's bytes (old bytes after the cut), as a
	// torn pwrite leaves it, is invalid or the old slot 1: never a third
	// record. Slot 1 held padding before.
	old := bytes.Repeat([]byte{' '}, size)
	old[size-1] = '\n'
	for cut := 1; cut < headerLen+300; cut++ {
		torn := append(bytes.Clone(newer[:cut]), old[cut:]...)
		if s := DecodeSlot(torn); s.Valid {
			t.Fatalf("slot torn after %d bytes decodes as valid", cut)
		}
	}
}

func TestZeroedSlotAndBadCRC(t *testing.T) {
	m, w := newMem(t, "provisioning")
	if err := w.Write([]byte("running"), false); err != nil {
		t.Fatal(err)
	}
	size := w.SlotSize()
	z := bytes.Clone(m.b)
	for i := size; i < 2*size; i++ {
		z[i] = 0
	}
	if s := DecodeSlot(z[size:]); s.Valid || s.Why != "zeroed" {
		t.Fatalf("zeroed slot: %+v", s)
	}
	if got, _ := decodeString(t, z); got != "provisioning" {
		t.Fatalf("zeroed newer slot: got %q", got)
	}
	for _, at := range []int{size + headerLen, size + 4, size + crcAt + 7} {
		c := bytes.Clone(m.b)
		c[at] ^= 0x01
		if s := DecodeSlot(c[size:]); s.Valid {
			t.Fatalf("a bit flipped at %d still decodes", at-size)
		}
		if got, _ := decodeString(t, c); got != "provisioning" {
			t.Fatalf("flip at %d: got %q", at-size, got)
		}
	}
	// Both slots bad: an error that says why, never a record.
	both := bytes.Clone(z)
	for i := range size {
		both[i] = 0
	}
	if _, err := Decode(both); err == nil || !strings.Contains(err.Error(), "no valid slot") {
		t.Fatalf("both zeroed: %v", err)
	}
}

func TestOversize(t *testing.T) {
	m, w := newMem(t, "small")
	before := bytes.Clone(m.b)
	big := bytes.Repeat([]byte("x"), w.SlotSize())
	if err := w.Write(big, true); !errors.Is(err, ErrTooBig) {
		t.Fatalf("oversize write: %v", err)
	}
	if !bytes.Equal(before, m.b) || m.syncs != 0 {
		t.Fatal("an oversize write changed the file")
	}
	if w.Fits(len(big)) {
		t.Fatal("Fits says an oversize record fits")
	}
	// A length field larger than the slot is invalid, not a panic.
	s := bytes.Clone(m.b[:w.SlotSize()])
	copy(s[len(Magic)+25:], "7fffffff")
	if d := DecodeSlot(s); d.Valid {
		t.Fatal("a slot claiming more bytes than it has decodes")
	}
	// Files of a size no writer makes are refused.
	for _, n := range []int{0, 1, 511, 1000, 2 * (MaxSlot + Align)} {
		if _, err := Decode(make([]byte, n)); err == nil {
			t.Fatalf("a file of %d bytes decodes", n)
		}
	}
}

func TestIsSlotFile(t *testing.T) {
	data, _ := Encode([]byte("{}"), 1, 0)
	if !IsSlotFile(data) || IsSlotFile([]byte(`{"version":1}`)) {
		t.Fatal("IsSlotFile does not tell a slot file from JSON")
	}
}

// Random records and random crash points: the file always decodes to
// the last synced record or a later one that was written whole.
func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		first := randPayload(r, 1+r.IntN(400))
		m, w := newMem(t, string(first))
		lastSynced, lastWritten := string(first), string(first)
		for range 1 + r.IntN(12) {
			p := randPayload(r, 1+r.IntN(w.SlotSize()))
			sync := r.IntN(3) == 0
			err := w.Write(p, sync)
			if errors.Is(err, ErrTooBig) {
				if w.Fits(len(p)) {
					t.Fatal("ErrTooBig for a record that fits")
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			lastWritten = string(p)
			if sync {
				lastSynced = lastWritten
			}
			if got, _ := decodeString(t, m.b); got != lastWritten {
				t.Fatalf("round %d: decoded %q, want %q", round, got, lastWritten)
			}
		}
		// Crash: the unsynced slot's bytes torn at a random point.
		crashed := bytes.Clone(m.synced)
		cut := r.IntN(len(m.b) + 1)
		copy(crashed[:cut], m.b[:cut])
		got, _ := decodeString(t, crashed)
		if got != lastSynced && got != lastWritten {
			t.Fatalf("round %d: after a crash %q, want %q or %q", round, got, lastSynced, lastWritten)
		}
	}
}

func randPayload(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(32 + r.IntN(95))
	}
	return b
}

func FuzzDecode(f *testing.F) {
	data, _ := Encode([]byte(`{"runId":"x"}`), 3, 0)
	f.Add(data)
	f.Add(make([]byte, 2*Align))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Decode(b)
		if err != nil {
			return
		}
		p := file.Payload()
		again, err := Encode(p, file.Seq(), file.SlotSize)
		if err != nil {
			t.Fatalf("a decoded record does not encode in its own slot size: %v", err)
		}
		if got, _ := Decode(again); !bytes.Equal(got.Payload(), p) {
			t.Fatal("round trip changed the record")
		}
	})
}

// Sync after an unsynced write makes that slot the durable one: the
// next write goes into the other.
func TestSyncMovesTheDurableSlot(t *testing.T) {
	m, w := newMem(t, "provisioning")
	if err := w.Write([]byte("running"), false); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil || m.syncs != 1 {
		t.Fatalf("a second Sync with nothing new: %v, %d fsyncs", err, m.syncs)
	}
	if err := w.Write([]byte("final"), false); err != nil {
		t.Fatal(err)
	}
	// Tear the new write: "running", synced, must survive.
	for i := range w.SlotSize() {
		m.b[i] = 0
	}
	if got, _ := decodeString(t, m.b); got != "running" {
		t.Fatalf("got %q", got)
	}
}
