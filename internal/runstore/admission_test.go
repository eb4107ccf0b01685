package runstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crew-dev/crew/internal/vocab"
)

func (s *Store) holderPath() string { return s.osPath(locksDir, holderName) }

// admissionLockFile makes sure the admission lock file exists (crew makes
// it at the first admission) and returns its path.
func admissionLockFile(t *testing.T, s *Store) string {
	t.Helper()
	lockAdmission(t, s).Release()
	return s.admissionLockPath()
}

// holdAdmission starts a helper process that takes the admission lock of
// the state root.
func holdAdmission(t *testing.T, root string, env ...string) *helper {
	t.Helper()
	h := startHelper(t, "hold-admission", root, env...)
	h.Expect("waiting")
	h.Expect("locked")
	return h
}

type lockResult struct {
	adm  *Admission
	err  error
	took time.Duration
}

// lockAsync runs LockAdmission in a goroutine so a broken implementation
// that blocks forever fails the test instead of hanging it.
func lockAsync(ctx context.Context, s *Store, timeout time.Duration) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		start := time.Now()
		a, err := s.LockAdmission(ctx, timeout)
		ch <- lockResult{a, err, time.Since(start)}
	}()
	return ch
}

func awaitLock(t *testing.T, ch <-chan lockResult, within time.Duration) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.adm != nil {
			t.Cleanup(r.adm.Release)
		}
		return r
	case <-time.After(within):
		t.Fatalf("LockAdmission did not return within %s", within)
	}
	return lockResult{}
}

// readHolderNote reads the holder note as an outsider would.
func readHolderNote(t *testing.T, s *Store) (vocab.Holder, error) {
	t.Helper()
	b, err := os.ReadFile(s.holderPath())
	if err != nil {
		return vocab.Holder{}, err
	}
	return ParseHolder(string(b))
}

func TestLockAdmissionFreeWritesHolderNote(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state")) // LockAdmission creates the root
	defer s.Close()
	before := time.Now().Add(-time.Second)
	a, err := s.LockAdmission(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readHolderNote(t, s)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if h.PID != os.Getpid() || h.Host != host {
		t.Errorf("holder = %+v, want pid %d host %q", h, os.Getpid(), host)
	}
	if h.Since.Before(before) || h.Since.After(time.Now().Add(time.Second)) {
		t.Errorf("holder since = %v, want about now", h.Since)
	}
	assertMode(t, s.holderPath(), FilePerm)
	a.Release()
	if _, err := os.Stat(s.admissionLockPath()); err != nil {
		t.Fatalf("Release removed the admission lock file: %v", err)
	}
	// Releasing twice is harmless.
	a.Release()
	// Free again, in this process and in another.
	a, err = s.LockAdmission(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	h2 := holdAdmission(t, s.Root())
	h2.Finish()
	if _, err := os.Stat(s.admissionLockPath()); err != nil {
		t.Fatalf("lock file gone after a helper's acquire and exit: %v", err)
	}
}

func TestLockAdmissionTimesOutNamingHolder(t *testing.T) {
	s := newStore(t)
	h := holdAdmission(t, s.Root())

	const timeout = 250 * time.Millisecond
	r := awaitLock(t, lockAsync(context.Background(), s, timeout), 10*time.Second)
	if r.err == nil {
		t.Fatal("LockAdmission succeeded while another process holds the lock")
	}
	var te *vocab.LockTimeoutError
	if !errors.As(r.err, &te) {
		t.Fatalf("error %v (%T), want *LockTimeoutError", r.err, r.err)
	}
	if r.took < timeout {
		t.Errorf("gave up after %s, before the %s timeout", r.took, timeout)
	}
	if te.Waited < timeout-10*time.Millisecond || te.Waited > r.took+time.Millisecond {
		t.Errorf("Waited = %s, want about %s", te.Waited, timeout)
	}
	if te.Path != s.Root() || te.LockFile != s.admissionLockPath() {
		t.Errorf("Path, LockFile = %q, %q; want %q, %q", te.Path, te.LockFile, s.Root(), s.admissionLockPath())
	}
	if te.Holder.PID != h.Pid() || te.HoldErr != nil {
		t.Errorf("Holder = %+v (err %v), want pid %d", te.Holder, te.HoldErr, h.Pid())
	}
	host, _ := os.Hostname()
	if te.Holder.Host != host {
		t.Errorf("Holder.Host = %q, want %q", te.Holder.Host, host)
	}
	msg := r.err.Error()
	for _, want := range []string{fmt.Sprintf("pid %d", h.Pid()), s.admissionLockPath(), "timed out"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	// The waiter did not disturb the holder: its note is intact.
	if hn, err := readHolderNote(t, s); err != nil || hn.PID != h.Pid() {
		t.Errorf("holder note after a timed-out wait = %+v, %v", hn, err)
	}
}

func TestLockAdmissionZeroTimeoutFailsWhenBusy(t *testing.T) {
	s := newStore(t)
	h := holdAdmission(t, s.Root())
	r := awaitLock(t, lockAsync(context.Background(), s, 0), 5*time.Second)
	var te *vocab.LockTimeoutError
	if !errors.As(r.err, &te) {
		t.Fatalf("error %v, want *LockTimeoutError", r.err)
	}
	if te.Holder.PID != h.Pid() {
		t.Errorf("Holder.PID = %d, want %d", te.Holder.PID, h.Pid())
	}
}

// A holder killed with SIGKILL releases at once: even a zero timeout gets
// the lock right after the holder is reaped.
func TestLockAdmissionRightAfterHolderSIGKILL(t *testing.T) {
	s := newStore(t)
	h := holdAdmission(t, s.Root())
	h.Kill()
	r := awaitLock(t, lockAsync(context.Background(), s, 0), 5*time.Second)
	if r.err != nil {
		t.Fatalf("LockAdmission(timeout 0) after the holder was killed: %v", r.err)
	}
	if hn, err := readHolderNote(t, s); err != nil || hn.PID != os.Getpid() {
		t.Errorf("holder note = %+v, %v; want this process", hn, err)
	}
}

// A waiter that is still within its timeout gets the lock as soon as the
// holder releases it; until then it is excluded.
func TestLockAdmissionWaitsForRelease(t *testing.T) {
	s := newStore(t)
	h := holdAdmission(t, s.Root())
	ch := lockAsync(context.Background(), s, time.Minute)
	select {
	case r := <-ch:
		if r.adm != nil {
			r.adm.Release()
		}
		t.Fatalf("LockAdmission returned (%v) while another process holds the lock", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	h.Send("release")
	h.Expect("released")
	r := awaitLock(t, ch, 10*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if hn, err := readHolderNote(t, s); err != nil || hn.PID != os.Getpid() {
		t.Errorf("holder note = %+v, %v; want this process", hn, err)
	}
}

// The reverse direction: while this process holds the lock, another
// process waits, and gets it when we release.
func TestLockAdmissionExcludesOtherProcess(t *testing.T) {
	s := newStore(t)
	a := lockAdmission(t, s)
	h := startHelper(t, "hold-admission", s.Root())
	h.Expect("waiting")
	h.SilentFor(300 * time.Millisecond)
	a.Release()
	h.Expect("locked")
	if hn, err := readHolderNote(t, s); err != nil || hn.PID != h.Pid() {
		t.Errorf("holder note = %+v, %v; want the helper %d", hn, err, h.Pid())
	}
}

func TestLockAdmissionTimeoutErrorFromOtherProcess(t *testing.T) {
	s := newStore(t)
	lockAdmission(t, s)
	h := startHelper(t, "hold-admission", s.Root(), helperTimeout+"=150ms")
	h.Expect("waiting")
	line := h.Expect("timeout ")
	if want := fmt.Sprintf("held by pid %d ", os.Getpid()); !strings.Contains(line, want) {
		t.Errorf("helper's error %q does not contain %q", line, want)
	}
}

func TestLockAdmissionContextCanceled(t *testing.T) {
	s := newStore(t)
	holdAdmission(t, s.Root())
	ctx, cancel := context.WithCancel(context.Background())
	ch := lockAsync(ctx, s, time.Minute)
	blockedOn(t, s.admissionLockPath(), os.Getpid())
	cancel()
	r := awaitLock(t, ch, 5*time.Second)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", r.err)
	}
	var te *vocab.LockTimeoutError
	if errors.As(r.err, &te) {
		t.Errorf("a canceled wait reported a timeout: %v", r.err)
	}
	if !strings.Contains(r.err.Error(), s.admissionLockPath()) {
		t.Errorf("error %q does not name the lock", r.err)
	}
}

func TestLockAdmissionMissingHolderNote(t *testing.T) {
	s := newStore(t)
	// A process holds the lock without having written a note.
	lock := admissionLockFile(t, s)
	if err := os.Remove(s.holderPath()); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, "hold-flock", lock)
	h.Expect("locked")
	r := awaitLock(t, lockAsync(context.Background(), s, 100*time.Millisecond), 5*time.Second)
	var te *vocab.LockTimeoutError
	if !errors.As(r.err, &te) {
		t.Fatalf("error = %v, want *LockTimeoutError", r.err)
	}
	if te.Holder.PID != 0 || !errors.Is(te.HoldErr, fs.ErrNotExist) {
		t.Errorf("Holder = %+v, HoldErr = %v; want unknown holder and ErrNotExist", te.Holder, te.HoldErr)
	}
	if !strings.Contains(te.Error(), "unknown process") {
		t.Errorf("error %q does not say the holder is unknown", te.Error())
	}
}

// A holder note that is not a small regular file (planted junk, a link, a
// FIFO) is reported as unreadable; reading it never blocks the waiter that
// is about to report a timeout, and never follows the link.
func TestLockAdmissionUnreadableHolderNote(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "note")
	writeString(t, outside, "4711 2024-05-06T07:08:09.123456789Z elsewhere\n")
	tests := map[string]func(t *testing.T, path string){
		"oversized": func(t *testing.T, path string) { writeString(t, path, strings.Repeat("9", 2*holderSize)) },
		"link": func(t *testing.T, path string) {
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		},
		"FIFO": func(t *testing.T, path string) { mkfifo(t, path) },
	}
	for name, plant := range tests {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			lock := admissionLockFile(t, s)
			if err := os.Remove(s.holderPath()); err != nil {
				t.Fatal(err)
			}
			plant(t, s.holderPath())
			h := startHelper(t, "hold-flock", lock)
			h.Expect("locked")
			r := awaitLock(t, lockAsync(context.Background(), s, 50*time.Millisecond), 5*time.Second)
			var te *vocab.LockTimeoutError
			if !errors.As(r.err, &te) {
				t.Fatalf("error = %v, want *LockTimeoutError", r.err)
			}
			if te.Holder.PID != 0 || te.HoldErr == nil {
				t.Errorf("Holder = %+v, HoldErr = %v; want an unknown holder and why", te.Holder, te.HoldErr)
			}
		})
	}
}

// Where no state root can be made, the error names it.
func TestLockAdmissionRootCannotBeMade(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	writeString(t, file, "x")
	root := filepath.Join(file, "state")
	_, err := New(root).LockAdmission(context.Background(), time.Second)
	if err == nil {
		t.Fatal("LockAdmission under a regular file succeeded")
	}
	if !strings.Contains(err.Error(), root) {
		t.Errorf("error %q does not name the root", err)
	}
}

// Something planted at the holder note's name (a directory, a link, a
// FIFO, a hard link to a file outside) is moved aside into quarantine/ and
// a fresh note is written: never through it, and it never stops admission.
func TestLockAdmissionMovesAPlantedHolderNoteAside(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	writeString(t, outside, "precious")
	tests := map[string]func(t *testing.T, path string){
		"directory": func(t *testing.T, path string) { mkdirAll(t, path) },
		"link": func(t *testing.T, path string) {
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		},
		"FIFO": func(t *testing.T, path string) { mkfifo(t, path) },
		"hard link": func(t *testing.T, path string) {
			if err := os.Link(outside, path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, plant := range tests {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			plant(t, s.holderPath())
			a, err := returnsAtOnce(t, "LockAdmission", func() (*Admission, error) {
				return s.LockAdmission(context.Background(), time.Second)
			})
			if err != nil {
				t.Fatalf("LockAdmission with a planted holder note: %v", err)
			}
			a.Release()
			if h, err := s.readHolder(); err != nil || h.PID != os.Getpid() {
				t.Errorf("holder note = %+v, %v; want a fresh one naming us", h, err)
			}
			if _, err := os.Lstat(s.osPath(quarantineDir, holderName)); err != nil {
				t.Errorf("the planted note is not in quarantine: %v", err)
			}
			note := readString(t, s.osPath(quarantineDir, holderName+".why"))
			if !strings.Contains(note, "original path: "+s.holderPath()) {
				t.Errorf("quarantine note = %q", note)
			}
		})
	}
	if readString(t, outside) != "precious" {
		t.Error("the holder note was written through a link")
	}
}

// When the planted note cannot even be moved aside (quarantine/ is not a
// directory), LockAdmission fails naming the note, and the lock is not left
// held after the error.
func TestLockAdmissionHolderNoteUnwritable(t *testing.T) {
	s := newStore(t)
	mkdirAll(t, s.holderPath())
	writeString(t, s.osPath(quarantineDir), "not a directory")
	if a, err := s.LockAdmission(context.Background(), time.Second); err == nil {
		a.Release()
		t.Fatal("LockAdmission succeeded although the holder note could not be written")
	} else if !strings.Contains(err.Error(), s.holderPath()) {
		t.Errorf("error %q does not name the holder note", err)
	}
	if err := os.RemoveAll(s.holderPath()); err != nil {
		t.Fatal(err)
	}
	// Another process gets the lock at once: it was not left held.
	h := startHelper(t, "hold-admission", s.Root(), helperTimeout+"=0s")
	h.Expect("waiting")
	h.Expect("locked")
}

// The note is rewritten in place with a fixed width: a longer older note
// (or junk) never leaves a tail that breaks the reader.
func TestHolderNoteOverwritesLongerContent(t *testing.T) {
	s := newStore(t)
	junk := strings.Repeat("9", 2*holderSize) + " garbage without newline"
	writeString(t, s.holderPath(), junk)
	lockAdmission(t, s)
	h, err := s.readHolder()
	if err != nil {
		t.Fatalf("readHolder after rewrite over junk: %v", err)
	}
	if h.PID != os.Getpid() {
		t.Errorf("PID = %d, want %d", h.PID, os.Getpid())
	}
	b, err := os.ReadFile(s.holderPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != holderSize {
		t.Errorf("note is %d bytes, want the fixed %d", len(b), holderSize)
	}
	note, pad, ok := strings.Cut(string(b[:holderSize]), "\n")
	if !ok {
		t.Fatalf("note's first %d bytes have no newline: %q", holderSize, b[:holderSize])
	}
	// Padded with spaces to the fixed width, so the old content's tail
	// starts only past it.
	if strings.Trim(pad, " ") != "" {
		t.Errorf("note %q is followed by %q within its %d bytes, want space padding", note, pad, holderSize)
	}
}

func TestParseHolder(t *testing.T) {
	since := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	tests := []struct {
		name    string
		content string
		want    vocab.Holder
		wantErr string
	}{
		{"ok", "4711 2024-05-06T07:08:09.123456789Z build-host\n", vocab.Holder{PID: 4711, Host: "build-host", Since: since}, ""},
		{"padded", "4711 2024-05-06T07:08:09.123456789Z h\n" + strings.Repeat(" ", 200), vocab.Holder{PID: 4711, Host: "h", Since: since}, ""},
		{"host with spaces", "1 2024-05-06T07:08:09.123456789Z my host\n", vocab.Holder{PID: 1, Host: "my host", Since: since}, ""},
		{"empty host", "1 2024-05-06T07:08:09.123456789Z \n", vocab.Holder{PID: 1, Host: "", Since: since}, ""},
		{"no newline", "1 2024-05-06T07:08:09.123456789Z h", vocab.Holder{PID: 1, Host: "h", Since: since}, ""},
		{"empty", "", vocab.Holder{}, "malformed"},
		{"two fields", "1 2024-05-06T07:08:09Z\n", vocab.Holder{}, "malformed"},
		{"bad pid", "x 2024-05-06T07:08:09Z h\n", vocab.Holder{}, "bad pid"},
		{"bad time", "1 yesterday h\n", vocab.Holder{}, "bad time"},
		{"only spaces", strings.Repeat(" ", holderSize), vocab.Holder{}, "bad pid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHolder(tc.content)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseHolder = %+v, %v; want error containing %q", got, err, tc.wantErr)
				}
				if got != (vocab.Holder{}) {
					t.Errorf("half-filled holder on error: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.PID != tc.want.PID || got.Host != tc.want.Host || !got.Since.Equal(tc.want.Since) {
				t.Errorf("ParseHolder = %+v, want %+v", got, tc.want)
			}
		})
	}
	s := newStore(t)
	if _, err := s.readHolder(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("readHolder(missing) = %v, want ErrNotExist", err)
	}
}

func TestHolderString(t *testing.T) {
	if s := (vocab.Holder{}).String(); !strings.Contains(s, "unknown process") {
		t.Errorf("zero Holder = %q", s)
	}
	h := vocab.Holder{PID: 4711, Host: "ci-7", Since: time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))}
	if got, want := h.String(), "pid 4711 on host ci-7 since 2024-01-02T02:04:05Z"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	te := &vocab.LockTimeoutError{Path: "/root/.locks/a.lock", Waited: 1500 * time.Millisecond, Holder: h}
	for _, want := range []string{"1.5s", "/root/.locks/a.lock", "pid 4711 on host ci-7", "--lock-timeout"} {
		if !strings.Contains(te.Error(), want) {
			t.Errorf("LockTimeoutError %q lacks %q", te.Error(), want)
		}
	}
}

// The state root moved aside and made anew while a waiter is blocked on
// the old one's lock: when the old holder lets go, the waiter holds a lock
// in a directory that is no longer the state root, while a newer process
// holds the new one's. It must see that and start over (and wait for the
// new holder), never believe it is inside.
func TestLockAdmissionStartsOverWhenTheRootIsReplaced(t *testing.T) {
	s := newStore(t)
	old := holdAdmission(t, s.Root())

	waiter := New(s.Root())
	defer waiter.Close()
	ch := lockAsync(context.Background(), waiter, time.Minute)
	blockedOn(t, s.admissionLockPath(), os.Getpid())

	// Someone moves the state root aside; a newer process makes it again
	// and takes its admission lock.
	if err := os.Rename(s.Root(), s.Root()+".old"); err != nil {
		t.Fatal(err)
	}
	newer := holdAdmission(t, s.Root())

	// The old holder lets go: the waiter now has the old, moved root's lock.
	old.Send("release")
	old.Expect("released")
	blockedOn(t, s.admissionLockPath(), os.Getpid()) // the new root's: it started over
	select {
	case r := <-ch:
		if r.adm != nil {
			r.adm.Release()
		}
		t.Fatalf("LockAdmission returned (%v) holding the moved-away root while another process holds the new one", r.err)
	default:
	}

	// When the newer holder lets go, the waiter gets the root at the path.
	newer.Send("release")
	newer.Expect("released")
	r := awaitLock(t, ch, 10*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.adm.Release()
	if !waiter.isStateRoot(r.adm.root) {
		t.Fatalf("the waiter holds a lock on a directory that is not the state root at %s", s.Root())
	}
	if same, err := r.adm.lock.StillAtName(); err != nil || !same {
		t.Fatalf("the waiter holds a lock file that is not %s (%v)", s.admissionLockPath(), err)
	}
}

// A process holds the admission lock when .locks/ is deleted: a second
// acquisition, which finds no lock file and makes a fresh one, must not
// be let in while the first is still inside.
func TestLockAdmissionExcludesAHolderOfARemovedLockFile(t *testing.T) {
	s := newStore(t)
	h := holdAdmission(t, s.Root())
	if err := os.RemoveAll(s.osPath(locksDir)); err != nil {
		t.Fatal(err)
	}
	second := New(s.Root())
	defer second.Close()
	r := awaitLock(t, lockAsync(context.Background(), second, 300*time.Millisecond), 10*time.Second)
	if r.err == nil {
		t.Errorf("LockAdmission succeeded while process %d still holds the admission lock it took before .locks/ was removed: two processes are inside", h.Pid())
	}
	h.Send("release")
	h.Expect("released")
}

// A store that took the admission lock before .locks/ was deleted and
// made again (a waiting start re-locks admission on every wake-up) still
// gets the lock, and writes its holder note into the new .locks/.
func TestLockAdmissionAfterLocksDirWasRecreated(t *testing.T) {
	s := newStore(t)
	a := lockAdmission(t, s)
	a.Release()
	for _, remake := range []bool{true, false} {
		if err := os.RemoveAll(s.osPath(locksDir)); err != nil {
			t.Fatal(err)
		}
		if remake {
			other := New(s.Root())
			if err := other.Ensure(); err != nil {
				t.Fatal(err)
			}
			other.Close()
		}
		r := awaitLock(t, lockAsync(context.Background(), s, time.Second), 10*time.Second)
		if r.err != nil {
			t.Fatalf("LockAdmission after .locks/ was removed (made again: %v) = %v, want the lock", remake, r.err)
		}
		h, err := s.readHolder()
		r.adm.Release()
		if err != nil || h.PID != os.Getpid() {
			t.Errorf("holder note after .locks/ was removed = %+v, %v; want this process", h, err)
		}
	}
}

func mustOpenRoot(t *testing.T, path string) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
