package fdbudget

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The init must run before package os's (see the package doc): that holds
// only while this package imports nothing but syscall.
func TestImportsOnlySyscall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path != "syscall" {
				t.Errorf("%s imports %s: this package's init could then run after os's", name, path)
			}
		}
	}
}

// withLimit lowers the soft RLIMIT_NOFILE to n for the test.
func withLimit(t *testing.T, n uint64) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	low := orig
	low.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
			t.Error(err)
		}
	})
}

func TestProbeCountsWhatIsFree(t *testing.T) {
	withLimit(t, 64)
	free, err := probe(1000)
	if err != syscall.EMFILE || free <= 2 || free > 64 {
		t.Fatalf("probe(1000) under a limit of 64 = %d, %v; want a count ended by EMFILE", free, err)
	}
	if again, _ := probe(1000); again != free {
		t.Fatalf("probe gave back fewer than it took: %d free, then %d", free, again)
	}
	var held []int
	for range 2 {
		fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, fd)
	}
	defer func() {
		for _, fd := range held {
			syscall.Close(fd)
		}
	}()
	if got, err := probe(1000); got != free-2 || err != syscall.EMFILE {
		t.Errorf("with two more open: probe(1000) = %d, %v; want %d, EMFILE", got, err, free-2)
	}
	if got, err := probe(free - 2); got != free-2 || err != nil {
		t.Errorf("probe(%d) = %d, %v; want all of them and no error", free-2, got, err)
	}
	if got, err := probe(0); got != 0 || err != nil {
		t.Errorf("probe(0) = %d, %v", got, err)
	}
}

func TestInheritedCountsDescriptorsWithoutCloseOnExec(t *testing.T) {
	withLimit(t, 64)
	base := inherited(64)
	fd, err := syscall.Dup(2) // dup: not close-on-exec, as an inherited one
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if fd >= 64 {
		t.Skipf("dup gave %d, above the limit set", fd)
	}
	if got := inherited(64); got != base+1 {
		t.Errorf("with one more open without close-on-exec: %d inherited, want %d", got, base+1)
	}
	syscall.CloseOnExec(fd)
	if got := inherited(64); got != base {
		t.Errorf("marked close-on-exec: %d inherited, want %d", got, base)
	}
}

func TestCheckUsesWhatInitCounted(t *testing.T) {
	saved := count
	t.Cleanup(func() { count = saved })

	count.ok, count.limit, count.free = true, 32, 5
	err := Check(Need)
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("Check(%d) with 5 free = %v, want an *Error", Need, err)
	}
	if e.Limit != 32 || e.InUse != 27 || e.Need != Need {
		t.Errorf("Check(%d) = %+v, want limit 32, 27 in use, need %d", Need, *e, Need)
	}
	if err := Check(5); err != nil {
		t.Errorf("Check(5) with 5 free = %v", err)
	}
	count.ok = false // could not count: crew's own errors will say
	if err := Check(Need); err != nil {
		t.Errorf("Check without a count = %v", err)
	}
}

func TestErrorSaysWhatToDo(t *testing.T) {
	cases := []struct {
		err  Error
		want string
	}{
		{Error{Limit: 6, InUse: 5, Need: 27},
			"this process may open only 6 files (ulimit -n) and 5 are already open, but crew needs 27 free: " +
				"raise the limit with `ulimit -n 32` (or more) and try again"},
		{Error{Limit: 32, InUse: 29, Inherited: 24, Need: 27},
			"this process may open only 32 files (ulimit -n) and 29 are already open, 24 of them inherited from the process that started crew, " +
				"but crew needs 27 free: raise the limit with `ulimit -n 56` (or more), " +
				"or have that process close them (or open them close-on-exec), and try again"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.err, got, c.want)
		}
	}
}

func TestItoa(t *testing.T) {
	for _, n := range []uint64{0, 7, 10, 4096, 1<<64 - 1} {
		if got, want := itoa(n), strconv.FormatUint(n, 10); got != want {
			t.Errorf("itoa(%d) = %q", n, got)
		}
	}
}

func TestOpenBelowCountsWhatProbeTakes(t *testing.T) {
	withLimit(t, 64)
	open, listed := openBelow(64)
	if !listed {
		t.Skip("/proc/self/fd cannot be read here")
	}
	free, err := probe(1000)
	if err != syscall.EMFILE {
		t.Fatalf("probe(1000) under a limit of 64: %d, %v; want a count ended by EMFILE", free, err)
	}
	if open+free != 64 {
		t.Errorf("/proc/self/fd lists %d open below 64 and probe found %d free: they must add up to 64", open, free)
	}
	fd, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if again, _ := openBelow(64); again != open+1 {
		t.Errorf("with one more open: %d listed, want %d", again, open+1)
	}
	if above, _ := openBelow(uint64(fd)); above >= open+1 {
		t.Errorf("below %d: %d listed, want fewer than %d (the dup at %d is not below)", fd, above, open+1, fd)
	}
}

func TestMeasureNearTheLimitIsExact(t *testing.T) {
	withLimit(t, 64)
	open, listed := openBelow(64)
	if !listed {
		t.Skip("/proc/self/fd cannot be read here")
	}
	limit, free, ok := measure(64 - open)
	if !ok || limit != 64 || free != 64-open {
		t.Errorf("measure(%d) with %d open under 64 = %d, %d, %v; want 64, %d, true", 64-open, open, limit, free, ok, 64-open)
	}
	if _, free, ok := measure(1000); !ok || free != 64-open {
		t.Errorf("measure(1000) with %d open under 64 = %d, %v; want the exact %d free", open, free, ok, 64-open)
	}
}
