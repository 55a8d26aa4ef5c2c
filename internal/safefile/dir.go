package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Dir is a folder being written in place of a target folder: the files go
// into a staging folder ".NAME.tmp-PID-RANDOM" (Path) beside the target, or
// inside it when it exists, and Commit moves them into place. Until Commit
// the target is untouched, so a writer that fails or is killed halfway
// leaves the old folder as it was. A Dir is not safe for concurrent use.
type Dir struct {
	target string // the folder Commit fills
	stage  string // the staging folder
	stop   func() // ends the signal cleanup of stage
	done   bool
}

// CreateDir starts writing the folder path: it creates the staging folder
// (and path's missing parent folders, as os.MkdirAll would). A symlink at
// path is followed, so the folder it points to is the one filled. CreateDir
// refuses a path that exists and is not a folder ([ErrNotDir]). Staging
// folders beside or inside path left by writers that died (SIGKILL) are
// removed first ([RemoveStaleTemps]).
func CreateDir(path string) (*Dir, error) {
	target, err := dirTarget(path)
	if err != nil {
		return nil, err
	}
	// The staging folder is a sibling of a new folder (renamed into place
	// as a whole) and a child of an existing one (its entries are moved
	// out): either way on the target's filesystem, and an existing folder
	// needs no write permission on its parent.
	in, base := filepath.Split(target)
	if fi, err := os.Stat(target); err == nil && fi.IsDir() {
		in = target
	} else if err := os.MkdirAll(in, 0o755); err != nil {
		return nil, err
	}
	RemoveStaleTemps(target)
	if in == target {
		RemoveStaleTemps(filepath.Join(target, base))
	}
	var stage string
	for range 1000 {
		stage = tempName(in, base)
		if err = os.Mkdir(stage, 0o755); !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, pathErr("create", target, stage, err)
	}
	stop := func() {}
	if signalCleanup.Load() {
		stop = removeOnSignal(func() { os.RemoveAll(stage) })
	}
	return &Dir{target: target, stage: stage, stop: stop}, nil
}

// Path is the staging folder: write the folder's files here.
func (d *Dir) Path() string { return d.stage }

// Name is the folder Commit fills (symlinks followed).
func (d *Dir) Name() string { return d.target }

// Commit fsyncs every file and folder staged, then puts them in place:
//
//   - a target that does not exist is replaced in one rename of the staging
//     folder (atomic: after a crash the folder is either absent or
//     complete);
//   - into an existing folder each staged entry is renamed over the entry
//     of its name (each file atomically, and a staged sub-folder replaces
//     only a missing or empty one). Files of the folder that the writer did
//     not produce stay, and the folder keeps its inode, owner and mode (a
//     shell inside it, a git checkout, stay valid). The set of files is not
//     replaced as one: a crash during these renames, which take
//     milliseconds where the writing took its time before, can leave some
//     files new and others old, each of them complete.
//
// On error the staging folder is removed. A Dir is finished after Commit.
func (d *Dir) Commit() error {
	if d.done {
		return pathErr("commit", d.target, "", os.ErrClosed)
	}
	d.done = true
	defer d.stop()
	fail := func(op string, err error) error {
		os.RemoveAll(d.stage)
		return pathErr(op, d.target, d.stage, err)
	}
	if err := syncTree(d.stage); err != nil {
		return fail("write", err)
	}
	parent := filepath.Dir(d.target)
	if _, err := os.Lstat(d.target); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(d.stage, d.target); err != nil {
			return fail("replace", err)
		}
		return pathErr("sync directory of", d.target, "", syncDir(parent))
	}
	ents, err := os.ReadDir(d.stage)
	if err != nil {
		return fail("write", err)
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(d.stage, e.Name()), filepath.Join(d.target, e.Name())); err != nil {
			return fail("replace", err)
		}
	}
	if err := syncDir(d.target); err != nil {
		return fail("sync", err)
	}
	return pathErr("remove staging folder of", d.target, "", os.Remove(d.stage))
}

// Abort removes the staging folder and leaves the target untouched. It is
// idempotent and does nothing after Commit.
func (d *Dir) Abort() error {
	if d == nil || d.done {
		return nil
	}
	d.done = true
	defer d.stop()
	return pathErr("abort", d.target, d.stage, os.RemoveAll(d.stage))
}

// dirTarget is the folder CreateDir(path) fills, absolute, with symlinks
// followed (so that the staging folder is its sibling on its filesystem).
func dirTarget(path string) (string, error) {
	if path == "" {
		return "", pathErr("create", path, "", fmt.Errorf("%w: empty path", ErrNotDir))
	}
	p, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	switch {
	case err == nil && !fi.IsDir():
		return "", pathErr("create", path, "", fmt.Errorf("%w: it is a file", ErrNotDir))
	case err == nil:
		return filepath.EvalSymlinks(p)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	return followDangling(p)
}

// syncTree fsyncs every regular file and folder under root, root included.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && !e.Type().IsRegular() {
			return nil
		}
		if e.IsDir() {
			return syncDir(p)
		}
		return fsync(p)
	})
}
