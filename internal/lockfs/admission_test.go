package lockfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type admissionPaths struct{ lock, holder string }

func newAdmissionPaths(t *testing.T) admissionPaths {
	t.Helper()
	dir := t.TempDir()
	return admissionPaths{
		lock:   filepath.Join(dir, "dispatch-admission.lock"),
		holder: filepath.Join(dir, "dispatch-admission.holder"),
	}
}

// holdAdmission starts a helper process that takes the admission lock.
func holdAdmission(t *testing.T, p admissionPaths) *helper {
	t.Helper()
	h := startHelper(t, "hold-admission", p.lock, func(c *exec.Cmd) {
		c.Env = append(c.Env, helperHolderEnv+"="+p.holder)
	})
	h.expect("waiting")
	h.expect("locked")
	return h
}

type acquireResult struct {
	lock *AdmissionLock
	err  error
	took time.Duration
}

// acquireAsync runs AcquireAdmission in a goroutine so a broken
// implementation that blocks forever fails the test instead of hanging it.
func acquireAsync(ctx context.Context, p admissionPaths, timeout time.Duration) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		start := time.Now()
		l, err := AcquireAdmission(ctx, p.lock, p.holder, timeout)
		ch <- acquireResult{l, err, time.Since(start)}
	}()
	return ch
}

func awaitAcquire(t *testing.T, ch <-chan acquireResult, within time.Duration) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.lock != nil {
			t.Cleanup(func() { _ = r.lock.Release() })
		}
		return r
	case <-time.After(within):
		t.Fatalf("AcquireAdmission did not return within %s", within)
	}
	return acquireResult{}
}

func TestAcquireAdmissionFreeWritesHolderNote(t *testing.T) {
	p := newAdmissionPaths(t)
	before := time.Now().Add(-time.Second)
	l, err := AcquireAdmission(context.Background(), p.lock, p.holder, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadHolder(p.holder)
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
	for _, path := range []string{p.lock, p.holder} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s mode = %v, want 0600", filepath.Base(path), perm)
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.lock); err != nil {
		t.Fatalf("Release removed the admission lock file: %v", err)
	}
	// Releasing twice is harmless.
	if err := l.Release(); err != nil {
		t.Errorf("second Release = %v", err)
	}
	// Free again, in this process and in another.
	l, err = AcquireAdmission(context.Background(), p.lock, p.holder, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	h2 := holdAdmission(t, p)
	h2.finish()
	if _, err := os.Stat(p.lock); err != nil {
		t.Fatalf("lock file gone after a helper's acquire and exit: %v", err)
	}
}

func TestAcquireAdmissionTimesOutNamingHolder(t *testing.T) {
	p := newAdmissionPaths(t)
	h := holdAdmission(t, p)

	const timeout = 250 * time.Millisecond
	r := awaitAcquire(t, acquireAsync(context.Background(), p, timeout), 5*time.Second)
	if r.err == nil {
		t.Fatal("AcquireAdmission succeeded while another process holds the lock")
	}
	var te *TimeoutError
	if !errors.As(r.err, &te) {
		t.Fatalf("error %v (%T), want *TimeoutError", r.err, r.err)
	}
	if r.took < timeout {
		t.Errorf("gave up after %s, before the %s timeout", r.took, timeout)
	}
	if r.took > timeout+2*time.Second {
		t.Errorf("gave up after %s, far past the %s timeout", r.took, timeout)
	}
	if te.Waited < timeout-10*time.Millisecond || te.Waited > r.took+time.Millisecond {
		t.Errorf("Waited = %s, want about %s", te.Waited, timeout)
	}
	if te.Path != p.lock {
		t.Errorf("Path = %q, want %q", te.Path, p.lock)
	}
	if te.Holder.PID != h.pid() || te.HoldErr != nil {
		t.Errorf("Holder = %+v (err %v), want pid %d", te.Holder, te.HoldErr, h.pid())
	}
	host, _ := os.Hostname()
	if te.Holder.Host != host {
		t.Errorf("Holder.Host = %q, want %q", te.Holder.Host, host)
	}
	msg := r.err.Error()
	for _, want := range []string{fmt.Sprintf("pid %d", h.pid()), p.lock, "timed out"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	// The waiter did not disturb the holder: its note is intact.
	if hn, err := ReadHolder(p.holder); err != nil || hn.PID != h.pid() {
		t.Errorf("holder note after a timed-out wait = %+v, %v", hn, err)
	}
}

func TestAcquireAdmissionZeroTimeoutFailsFastWhenBusy(t *testing.T) {
	p := newAdmissionPaths(t)
	h := holdAdmission(t, p)
	r := awaitAcquire(t, acquireAsync(context.Background(), p, 0), 2*time.Second)
	var te *TimeoutError
	if !errors.As(r.err, &te) {
		t.Fatalf("error %v, want *TimeoutError", r.err)
	}
	if te.Holder.PID != h.pid() {
		t.Errorf("Holder.PID = %d, want %d", te.Holder.PID, h.pid())
	}
	if r.took > time.Second {
		t.Errorf("zero timeout waited %s", r.took)
	}
}

func TestAcquireAdmissionSucceedsRightAfterHolderSIGKILL(t *testing.T) {
	p := newAdmissionPaths(t)
	h := holdAdmission(t, p)
	h.kill()
	r := awaitAcquire(t, acquireAsync(context.Background(), p, 5*time.Second), 6*time.Second)
	if r.err != nil {
		t.Fatalf("AcquireAdmission after the holder was killed: %v", r.err)
	}
	if r.took > time.Second {
		t.Errorf("took %s to take a lock whose holder is dead; it should be free at once", r.took)
	}
	if hn, err := ReadHolder(p.holder); err != nil || hn.PID != os.Getpid() {
		t.Errorf("holder note = %+v, %v; want this process", hn, err)
	}
	if _, err := os.Stat(p.lock); err != nil {
		t.Fatal(err)
	}
}

// A waiter that is still within its timeout gets the lock as soon as the
// holder releases it; until then it is excluded.
func TestAcquireAdmissionWaitsForRelease(t *testing.T) {
	p := newAdmissionPaths(t)
	h := holdAdmission(t, p)
	ch := acquireAsync(context.Background(), p, 10*time.Second)
	select {
	case r := <-ch:
		if r.lock != nil {
			_ = r.lock.Release()
		}
		t.Fatalf("AcquireAdmission returned (%v) while another process holds the lock", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	releasedAt := time.Now()
	h.send("release")
	h.expect("released")
	r := awaitAcquire(t, ch, 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if lag := time.Since(releasedAt); lag > time.Second {
		t.Errorf("handoff took %s", lag)
	}
	if _, err := os.Stat(p.lock); err != nil {
		t.Fatalf("lock file gone after the helper's Release: %v", err)
	}
}

// The reverse direction: while this process holds the lock, another
// process waits, and gets it when we release.
func TestAdmissionExcludesOtherProcess(t *testing.T) {
	p := newAdmissionPaths(t)
	l, err := AcquireAdmission(context.Background(), p.lock, p.holder, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, "hold-admission", p.lock, func(c *exec.Cmd) {
		c.Env = append(c.Env, helperHolderEnv+"="+p.holder)
	})
	h.expect("waiting")
	h.silentFor(300 * time.Millisecond)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	h.expect("locked")
	if hn, err := ReadHolder(p.holder); err != nil || hn.PID != h.pid() {
		t.Errorf("holder note = %+v, %v; want the helper %d", hn, err, h.pid())
	}
}

func TestAcquireAdmissionTimeoutErrorFromOtherProcess(t *testing.T) {
	p := newAdmissionPaths(t)
	l, err := AcquireAdmission(context.Background(), p.lock, p.holder, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	h := startHelper(t, "hold-admission", p.lock, func(c *exec.Cmd) {
		c.Env = append(c.Env, helperHolderEnv+"="+p.holder, helperTimeout+"=150ms")
	})
	h.expect("waiting")
	line := h.expect("error: ")
	if want := fmt.Sprintf("held by pid %d ", os.Getpid()); !strings.Contains(line, want) {
		t.Errorf("helper's error %q does not contain %q", line, want)
	}
}

func TestAcquireAdmissionContextCanceled(t *testing.T) {
	p := newAdmissionPaths(t)
	holdAdmission(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(ctx, p, 10*time.Second)
	time.Sleep(50 * time.Millisecond)
	cancel()
	r := awaitAcquire(t, ch, 2*time.Second)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", r.err)
	}
	var te *TimeoutError
	if errors.As(r.err, &te) {
		t.Errorf("a canceled wait reported a timeout: %v", r.err)
	}
	if !strings.Contains(r.err.Error(), p.lock) {
		t.Errorf("error %q does not name the lock", r.err)
	}
}

func TestAcquireAdmissionMissingHolderNote(t *testing.T) {
	p := newAdmissionPaths(t)
	// A process holds the lock without having written a note.
	h := startHelper(t, "hold-flock", p.lock)
	h.expect("locked")
	r := awaitAcquire(t, acquireAsync(context.Background(), p, 100*time.Millisecond), 5*time.Second)
	var te *TimeoutError
	if !errors.As(r.err, &te) {
		t.Fatalf("error = %v, want *TimeoutError", r.err)
	}
	if te.Holder.PID != 0 || !errors.Is(te.HoldErr, os.ErrNotExist) {
		t.Errorf("Holder = %+v, HoldErr = %v; want unknown holder and ErrNotExist", te.Holder, te.HoldErr)
	}
	if !strings.Contains(te.Error(), "unknown process") {
		t.Errorf("error %q does not say the holder is unknown", te.Error())
	}
}

func TestAcquireAdmissionMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	_, err := AcquireAdmission(context.Background(), filepath.Join(dir, "a.lock"), filepath.Join(dir, "a.holder"), time.Second)
	if err == nil {
		t.Fatal("AcquireAdmission in a missing directory succeeded")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name the path", err)
	}
}

func TestAcquireAdmissionHolderNoteUnwritable(t *testing.T) {
	p := newAdmissionPaths(t)
	// The holder path is a directory: the note cannot be written, and the
	// lock must not stay held after the error.
	if err := os.Mkdir(p.holder, 0o700); err != nil {
		t.Fatal(err)
	}
	if l, err := AcquireAdmission(context.Background(), p.lock, p.holder, time.Second); err == nil {
		l.Release()
		t.Fatal("AcquireAdmission succeeded although the holder note could not be written")
	}
	if err := os.Remove(p.holder); err != nil {
		t.Fatal(err)
	}
	r := awaitAcquire(t, acquireAsync(context.Background(), p, 0), 2*time.Second)
	if r.err != nil {
		t.Fatalf("lock left held after a failed AcquireAdmission: %v", r.err)
	}
}

// The note is rewritten in place with a fixed width: a longer older note
// (or junk) never leaves a tail that breaks the reader.
func TestHolderNoteOverwritesLongerContent(t *testing.T) {
	p := newAdmissionPaths(t)
	junk := strings.Repeat("9", 2*holderSize) + " garbage without newline"
	if err := os.WriteFile(p.holder, []byte(junk), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := AcquireAdmission(context.Background(), p.lock, p.holder, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	h, err := ReadHolder(p.holder)
	if err != nil {
		t.Fatalf("ReadHolder after rewrite over junk: %v", err)
	}
	if h.PID != os.Getpid() {
		t.Errorf("PID = %d, want %d", h.PID, os.Getpid())
	}
	// Shorter-than-before notes: the first line is a complete note.
	b, err := os.ReadFile(p.holder)
	if err != nil {
		t.Fatal(err)
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

func TestReadHolder(t *testing.T) {
	since := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	tests := []struct {
		name    string
		content string
		want    Holder
		wantErr string
	}{
		{"ok", "4711 2024-05-06T07:08:09.123456789Z build-host\n", Holder{4711, "build-host", since}, ""},
		{"padded", "4711 2024-05-06T07:08:09.123456789Z h\n" + strings.Repeat(" ", 200), Holder{4711, "h", since}, ""},
		{"host with spaces", "1 2024-05-06T07:08:09.123456789Z my host\n", Holder{1, "my host", since}, ""},
		{"empty host", "1 2024-05-06T07:08:09.123456789Z \n", Holder{1, "", since}, ""},
		{"no newline", "1 2024-05-06T07:08:09.123456789Z h", Holder{1, "h", since}, ""},
		{"empty", "", Holder{}, "malformed"},
		{"two fields", "1 2024-05-06T07:08:09Z\n", Holder{}, "malformed"},
		{"bad pid", "x 2024-05-06T07:08:09Z h\n", Holder{}, "bad pid"},
		{"bad time", "1 yesterday h\n", Holder{}, "bad time"},
		{"only spaces", strings.Repeat(" ", holderSize), Holder{}, "bad pid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "holder")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadHolder(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadHolder = %+v, %v; want error containing %q", got, err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name the file", err)
				}
				if got != (Holder{}) {
					t.Errorf("half-filled holder on error: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.PID != tc.want.PID || got.Host != tc.want.Host || !got.Since.Equal(tc.want.Since) {
				t.Errorf("ReadHolder = %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := ReadHolder(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadHolder(missing) = %v, want ErrNotExist", err)
	}
}

func TestHolderString(t *testing.T) {
	if s := (Holder{}).String(); !strings.Contains(s, "unknown process") {
		t.Errorf("zero Holder = %q", s)
	}
	h := Holder{PID: 4711, Host: "ci-7", Since: time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))}
	if got, want := h.String(), "pid 4711 on host ci-7 since 2024-01-02T02:04:05Z"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	te := &TimeoutError{Path: "/root/.locks/a.lock", Waited: 1500 * time.Millisecond, Holder: h}
	for _, want := range []string{"1.5s", "/root/.locks/a.lock", "pid 4711 on host ci-7", "--lock-timeout"} {
		if !strings.Contains(te.Error(), want) {
			t.Errorf("TimeoutError %q lacks %q", te.Error(), want)
		}
	}
}
