package main

import (
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/memstore"
)

// Every command that writes files checks its outputs against its inputs
// with safefile.CheckOutputs before it opens anything for writing, and
// writes through internal/safefile (atomic replacement).

// forceFlag is every writing command's one flag for replacing an existing
// output it did not write (safefile.CheckNew): without it such a file is
// refused, named.
var forceFlag = &cli.BoolFlag{Name: "force", Usage: "replace an existing output file (without it the command refuses to overwrite a file it did not write)"}

// checkNew refuses an existing output unless --force.
func checkNew(c *cli.Context, outputs ...safefile.Path) error {
	return safefile.CheckNew(outputs, c.Bool(forceFlag.Name))
}

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
