package main

import (
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/memstore"
)

// Every command that writes files checks its outputs against its inputs
// with safefile.CheckOutputs before it opens anything for writing, and
// writes through internal/safefile (atomic replacement).

// samePath reports whether a and b name the same file (safefile.SameFile:
// symlinks and hard links resolved).
func samePath(a, b string) bool { return safefile.SameFile(a, b) }

// dbPaths are a SQLite database named by flag and the files SQLite keeps
// beside it, as inputs of the output guard: writing over any of them
// destroys the database.
func dbPaths(flag, db string) []safefile.Path {
	if db == "" {
		return nil
	}
	var ps []safefile.Path
	for _, p := range memstore.Files(db) {
		ps = append(ps, safefile.Path{Flag: flag, Path: p})
	}
	return ps
}
