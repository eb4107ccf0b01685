package main

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The file ledger of one start, read from `strace -f -y` (ledgerTrace):
// files created, inodes freed (and how many of those had data: on a disk
// mounted with discard, each is a synchronous discard), renames, fsyncs.
// A creation is an open with O_CREAT (or creat, mkdir) that made a file:
// with O_EXCL or O_TMPFILE it did, without them only when the path did
// not exist (the ledger starts from a walk of the state root and follows
// every creation, rename and unlink). An inode is freed by an unlink or a
// rename over an existing file. Only paths under the state root count;
// fsyncs count wherever they are.

// ledgerTrace is the strace filter the ledger reads.
const ledgerTrace = "trace=open,openat,creat,mkdir,mkdirat,unlink,unlinkat,rmdir,rename,renameat,renameat2,write,pwrite64,writev,pwritev,ftruncate,fsync,fdatasync"

type ledger struct {
	created, dirsCreated, freed, freedWithData, renames, renamesOver, fsyncs int
}

// ledgerEntry is what the ledger knows of a path under the root.
type ledgerEntry struct{ data bool }

type ledgerState struct {
	root  string
	known map[string]*ledgerEntry
	l     ledger
}

// walkRoot lists what exists under root before the traced start, and
// whether it holds data (a directory always has a block).
func walkRoot(root string) (map[string]*ledgerEntry, error) {
	known := map[string]*ledgerEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		known[p] = &ledgerEntry{data: d.IsDir() || info.Size() > 0}
		return nil
	})
	return known, err
}

// readLedger reads a `strace -f -y -o FILE -e <ledgerTrace>` log of one
// start in root, whose files before the start were known.
func readLedger(log, root string, known map[string]*ledgerEntry) ledger {
	st := &ledgerState{root: filepath.Clean(root), known: known}
	pending := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		pid, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(rest, "---") || strings.HasPrefix(rest, "+++") {
			continue
		}
		rest = strings.TrimSpace(rest)
		if before, ok := strings.CutSuffix(rest, "<unfinished ...>"); ok {
			pending[pid] = strings.TrimSpace(before)
			continue
		}
		if m := resumedRe.FindStringSubmatch(rest); m != nil {
			rest = pending[pid] + rest[len(m[0]):]
			delete(pending, pid)
		}
		name, args, ret, ok := splitCall(rest)
		if ok {
			st.apply(name, args, ret)
		}
	}
	return st.l
}

var (
	resumedRe = regexp.MustCompile(`^<\.\.\. \w+ resumed>`)
	callRe    = regexp.MustCompile(`^(\w+)\((.*)\)\s+=\s+(.*)$`)
)

// splitCall splits `name(args) = ret` into the name, the arguments at the
// top level, and the return value.
func splitCall(s string) (name string, args []string, ret string, ok bool) {
	m := callRe.FindStringSubmatch(s)
	if m == nil {
		return "", nil, "", false
	}
	return m[1], splitArgs(m[2]), m[3], true
}

// splitArgs splits strace's argument list on the commas outside quotes
// and outside -y's <path> annotations.
func splitArgs(s string) []string {
	var out []string
	depth, quoted, esc, from := 0, false, false, 0
	for i, r := range s {
		switch {
		case esc:
			esc = false
		case quoted && r == '\\':
			esc = true
		case r == '"':
			quoted = !quoted
		case quoted:
		case r == '<' || r == '[' || r == '{':
			depth++
		case r == '>' || r == ']' || r == '}':
			depth--
		case r == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[from:i]))
			from = i + 1
		}
	}
	return append(out, strings.TrimSpace(s[from:]))
}

// fdPath is the path -y prints for a descriptor: `7</dir/file>`.
func fdPath(tok string) string {
	i := strings.IndexByte(tok, '<')
	if i < 0 || !strings.HasSuffix(tok, ">") {
		return ""
	}
	return strings.TrimSuffix(tok[i+1:len(tok)-1], " (deleted)")
}

// argPath resolves a path argument against its directory descriptor.
func argPath(dirfd, name string) string {
	n, err := strconv.Unquote(name)
	if err != nil {
		return ""
	}
	if filepath.IsAbs(n) {
		return filepath.Clean(n)
	}
	return filepath.Join(fdPath(dirfd), n)
}

func (st *ledgerState) under(p string) bool {
	return p == st.root || strings.HasPrefix(p, st.root+"/")
}

func succeeded(ret string) bool { return ret != "?" && !strings.HasPrefix(ret, "-1") }

func at(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

func (st *ledgerState) apply(name string, args []string, ret string) {
	if name == "fsync" || name == "fdatasync" {
		if succeeded(ret) {
			st.l.fsyncs++
		}
		return
	}
	if !succeeded(ret) {
		return
	}
	switch name {
	case "open", "creat":
		st.opened(fdPath(ret), at(args, 1), name == "creat")
	case "openat":
		p := fdPath(ret)
		if p == "" {
			p = argPath(at(args, 0), at(args, 1))
		}
		st.opened(p, at(args, 2), false)
	case "mkdir":
		st.mkdir(argPath("", at(args, 0)))
	case "mkdirat":
		st.mkdir(argPath(at(args, 0), at(args, 1)))
	case "unlink", "rmdir":
		st.free(argPath("", at(args, 0)))
	case "unlinkat":
		st.free(argPath(at(args, 0), at(args, 1)))
	case "rename":
		st.rename(argPath("", at(args, 0)), argPath("", at(args, 1)), "")
	case "renameat", "renameat2":
		st.rename(argPath(at(args, 0), at(args, 1)), argPath(at(args, 2), at(args, 3)), at(args, 4))
	case "write", "pwrite64", "writev", "pwritev":
		if e := st.entry(fdPath(at(args, 0))); e != nil && ret != "0" {
			e.data = true
		}
	case "ftruncate":
		if e := st.entry(fdPath(at(args, 0))); e != nil {
			e.data = at(args, 1) != "0"
		}
	}
}

// entry is the ledger's entry of a path under the root (made if the walk
// missed it), or nil for a path elsewhere.
func (st *ledgerState) entry(p string) *ledgerEntry {
	if p == "" || !st.under(p) {
		return nil
	}
	e := st.known[p]
	if e == nil {
		e = &ledgerEntry{}
		st.known[p] = e
	}
	return e
}

func (st *ledgerState) opened(p, flags string, creat bool) {
	if p == "" || !st.under(p) {
		return
	}
	has := func(f string) bool { return strings.Contains(flags, f) }
	if !creat && !has("O_CREAT") && !has("O_TMPFILE") {
		return
	}
	if creat || has("O_EXCL") || has("O_TMPFILE") || st.known[p] == nil {
		st.l.created++
		st.known[p] = &ledgerEntry{}
		return
	}
	if has("O_TRUNC") {
		st.known[p].data = false
	}
}

func (st *ledgerState) mkdir(p string) {
	if p == "" || !st.under(p) {
		return
	}
	st.l.created++
	st.l.dirsCreated++
	st.known[p] = &ledgerEntry{data: true}
}

func (st *ledgerState) free(p string) {
	if p == "" || !st.under(p) {
		return
	}
	st.l.freed++
	if e := st.known[p]; e == nil || e.data {
		st.l.freedWithData++ // unknown: count it, rather than miss a discard
	}
	delete(st.known, p)
}

func (st *ledgerState) rename(from, to, flags string) {
	if from == "" || to == "" || !st.under(to) {
		return
	}
	st.l.renames++
	if strings.Contains(flags, "RENAME_EXCHANGE") {
		st.known[from], st.known[to] = st.known[to], st.known[from]
		return
	}
	if e := st.known[to]; e != nil {
		st.l.renamesOver++
		st.l.freed++
		if e.data {
			st.l.freedWithData++
		}
	}
	e := st.known[from]
	if e == nil {
		e = &ledgerEntry{}
	}
	st.known[to] = e
	delete(st.known, from)
}
