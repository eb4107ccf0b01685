package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCrewSource(t *testing.T) {
	repo := t.TempDir()
	bench := filepath.Join(repo, "bench")
	if err := os.MkdirAll(bench, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(dir, mod string) {
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+mod+"\n\ngo 1.26.8\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(repo, crewModule)
	write(bench, crewModule+"/bench")
	if got, err := crewSource(repo); err != nil || got != repo {
		t.Fatalf("crewSource(repo) = %q, %v", got, err)
	}
	if _, err := crewSource(bench); err == nil {
		t.Fatal("the bench module must not pass for crew's source")
	}
	t.Chdir(bench)
	if got, err := crewSource(""); err != nil || got != repo {
		t.Fatalf("crewSource from bench/ = %q, %v; want %q", got, err, repo)
	}
}
