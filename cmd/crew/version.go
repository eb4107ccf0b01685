package main

import (
	"fmt"
	"runtime/debug"
)

// version is crew's version, set when crew is built for release:
//
//	go build -ldflags "-X main.version=1.2.0" ./cmd/crew
//
// (make build sets it from git describe). Unset, versionString takes what
// the Go toolchain recorded in the binary: the module version it derived
// from the repository, or the commit.
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if v == "" || v == "(devel)" {
		v = "devel"
		if rev != "" {
			v += " " + rev[:min(12, len(rev))]
			if modified == "true" {
				v += "+dirty"
			}
		}
	}
	return fmt.Sprintf("%s (%s)", v, info.GoVersion)
}
