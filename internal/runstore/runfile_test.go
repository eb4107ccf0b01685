package runstore

import (
	"bytes"
	"os"
	"testing"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/slotrec"
)

// slotsOf decodes the record file at path into its slots.
func slotsOf(t *testing.T, path string) *slotrec.File {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := slotrec.Decode(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// The life of a run's record file: created with the provisioning record
// in slot 0; running written into slot 1 (not synced); the final record
// into slot 1 again (the durable one is still slot 0), synced; then the
// same file (inode) moved into runs/done.
func TestRunFileLife(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	path := s.ActivePath(testID)
	f := slotsOf(t, path)
	if f.Newest != 0 || f.Seq() != 1 || f.Slots[1].Valid {
		t.Fatalf("after Reserve: newest %d seq %d, slot 1 valid %v", f.Newest, f.Seq(), f.Slots[1].Valid)
	}
	before, _ := os.Stat(path)
	if err := l.Update(testRecord(testID, record.Running)); err != nil {
		t.Fatal(err)
	}
	if f = slotsOf(t, path); f.Newest != 1 || f.Seq() != 2 || !f.Slots[0].Valid {
		t.Fatalf("after Update: newest %d seq %d, slot 0 valid %v", f.Newest, f.Seq(), f.Slots[0].Valid)
	}
	final := finalOf(testRecord(testID, record.Running), record.Succeeded, 0, "")
	if err := l.Finish(final); err != nil {
		t.Fatal(err)
	}
	assertMissing(t, path)
	after, err := os.Stat(s.DonePath(testID))
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the finished record is not the reserved file, moved: %v", err)
	}
	f = slotsOf(t, s.DonePath(testID))
	// Slot 0 still holds the provisioning record: the unsynced running
	// record and then the final one went into slot 1.
	if f.Newest != 1 || f.Seq() != 3 {
		t.Fatalf("finished: newest %d seq %d", f.Newest, f.Seq())
	}
	if rec, err := decodeRecord(f.Slots[0].Payload); err != nil || rec.State != record.Provisioning {
		t.Fatalf("slot 0: %+v, %v", rec, err)
	}
	if rec, err := s.ReadDone(testID); err != nil || rec.State != record.Succeeded {
		t.Fatalf("ReadDone = %+v, %v", rec, err)
	}
}

// A torn write of the running record (its slot zeroed, as a power loss
// in the middle of the pwrite can leave it) leaves the provisioning
// record, which is durable: the run reads as provisioning.
func TestTornRunningSlotLeavesProvisioning(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	if err := l.Update(testRecord(testID, record.Running)); err != nil {
		t.Fatal(err)
	}
	path := s.ActivePath(testID)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	half := len(data) / 2
	copy(data[half+100:], bytes.Repeat([]byte{0}, half-100))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := s.ReadActive(testID)
	if err != nil || rec.State != record.Provisioning {
		t.Fatalf("ReadActive after a torn running slot = %+v, %v", rec, err)
	}
}

// A record that outgrows its slot (many retry attempts) is written into
// a new, bigger file through renameio; the run goes on in that file.
func TestRecordOutgrowingItsSlot(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	path := s.ActivePath(testID)
	before, _ := os.Stat(path)
	rec := testRecord(testID, record.Running)
	for i := range 200 {
		rec.AddEvent(rec.CreatedAt, "attempt %d of 200 started: pid %d", i+1, 1000+i)
	}
	if err := l.Update(rec); err != nil {
		t.Fatal(err)
	}
	grown, _ := os.Stat(path)
	if os.SameFile(before, grown) || grown.Size() <= before.Size() {
		t.Fatalf("a record that does not fit was written in place (%d → %d bytes)", before.Size(), grown.Size())
	}
	if got, err := s.ReadActive(testID); err != nil || len(got.Events) != len(rec.Events) {
		t.Fatalf("ReadActive = %v events, %v", len(got.Events), err)
	}
	// Updates go on in place in the new file.
	rec.AddEvent(rec.CreatedAt, "one more")
	if err := l.Update(rec); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Stat(path); !os.SameFile(grown, again) {
		t.Fatal("the update after the growth replaced the file again")
	}
	final := finalOf(rec, record.Failed, 1, "")
	if err := l.Finish(final); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadDone(testID); err != nil || got.State != record.Failed || len(got.Events) != len(final.Events) {
		t.Fatalf("ReadDone = %+v, %v", got, err)
	}
}

// A detached supervisor (or a fence) opens the file anew: what it holds
// is made durable first, so the next write goes into the other slot.
func TestReopenedRunFileWritesBesideTheNewest(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	if err := l.Update(testRecord(testID, record.Running)); err != nil {
		t.Fatal(err)
	}
	adopted, err := s.AdoptRunLocks(testID, l.OwnerFile(), l.SupervisorFile())
	if err != nil {
		t.Fatal(err)
	}
	rec := testRecord(testID, record.Running)
	rec.AddEvent(rec.CreatedAt, "adopted")
	if err := adopted.Update(rec); err != nil {
		t.Fatal(err)
	}
	f := slotsOf(t, s.ActivePath(testID))
	if f.Newest != 0 || f.Seq() != 3 || !f.Slots[1].Valid {
		t.Fatalf("after the adopter's update: newest %d seq %d; the running record in slot 1 valid %v", f.Newest, f.Seq(), f.Slots[1].Valid)
	}
}

// A file at the record's name that is not a slot file (a planted JSON
// record under the new name) is replaced by a whole one when its run is
// finalized under the fence.
func TestFinishReplacesARecordFileThatIsNotASlotFile(t *testing.T) {
	s := newStore(t)
	b, err := testRecord(testID, record.Running).Encode()
	if err != nil {
		t.Fatal(err)
	}
	mkdirAll(t, s.osPath(activeDir))
	writeString(t, s.ActivePath(testID), string(b))
	fence, err := s.Fence(testID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Finish(finalOf(testRecord(testID, record.Running), record.Interrupted, 1, "owner gone")); err != nil {
		t.Fatal(err)
	}
	slotsOf(t, s.DonePath(testID))
	if rec, err := s.ReadDone(testID); err != nil || rec.State != record.Interrupted {
		t.Fatalf("ReadDone = %+v, %v", rec, err)
	}
	assertMissing(t, s.ActivePath(testID))
}

// A record file removed from under its supervisor (by hand) is made anew,
// as a record file, by the next write: the run keeps a record.
func TestUpdateRemakesARemovedRecordFile(t *testing.T) {
	s := newStore(t)
	l := reserve(t, s, testID)
	l.rf.close()
	l.rf = nil // as a detached supervisor that has not opened it yet
	if err := os.Remove(s.ActivePath(testID)); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(testRecord(testID, record.Running)); err != nil {
		t.Fatal(err)
	}
	slotsOf(t, s.ActivePath(testID))
	assertMissing(t, s.osPath(activeDir, string(testID)+".json"))
	if rec, err := s.ReadActive(testID); err != nil || rec.State != record.Running {
		t.Fatalf("ReadActive = %+v, %v", rec, err)
	}
}
