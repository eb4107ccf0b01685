module github.com/crew-dev/crew/bench

go 1.26.8

require golang.org/x/sys v0.50.0
