package safefile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrNotFile: a path that must name a file names a directory ("." or
// "out/" included).
var ErrNotFile = errors.New("not a file path")

// ErrNotDir: a path that must name a folder names something else.
var ErrNotDir = errors.New("not a folder path")

// bufSize is the write buffer of a File.
const bufSize = 1 << 20

// File is a file being written in place of a target path. Write to it, then
// Commit to put it in place or Abort to drop it; the target is untouched
// until Commit renames the finished file over it. A File is not safe for
// concurrent use.
type File struct {
	target string // the path Commit replaces
	tmp    string // the temporary file; "" when a device is written in place
	f      *os.File
	w      *bufio.Writer
	stop   func() // ends the signal cleanup of tmp
	done   bool
}

// Create starts writing path: a temporary file ".NAME.tmp-PID-RANDOM" in
// path's directory, created with perm (less the umask), or with the mode of
// the file it replaces. A symlink at path is followed: the file it points to
// is replaced, as os.Create would write it. An existing device, FIFO or
// socket (/dev/null, /dev/stdout) is written in place, since it cannot be
// replaced. Create refuses, before creating anything, a path that names a
// directory ("." or "out/" included; [ErrNotFile]) and one whose directory
// does not exist. Temporary files beside path left by writers that died
// (SIGKILL) are removed first ([RemoveStaleTemps]).
func Create(path string, perm os.FileMode) (*File, error) {
	target, device, err := fileTarget(path)
	if err != nil {
		return nil, err
	}
	if device {
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		return &File{target: target, f: f, w: bufio.NewWriterSize(f, bufSize), stop: func() {}}, nil
	}
	RemoveStaleTemps(target)
	dir, base := filepath.Split(target)
	f, tmp, err := createTemp(dir, base, perm)
	if err != nil {
		return nil, pathErr("create", target, "", err)
	}
	if fi, err := os.Stat(target); err == nil && fi.Mode().IsRegular() {
		if err := f.Chmod(fi.Mode().Perm()); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, pathErr("create", target, tmp, err)
		}
	}
	stop := func() {}
	if signalCleanup.Load() {
		stop = removeOnSignal(func() { os.Remove(tmp) })
	}
	return &File{target: target, tmp: tmp, f: f, w: bufio.NewWriterSize(f, bufSize), stop: stop}, nil
}

// Name is the path the file replaces (symlinks followed).
func (f *File) Name() string { return f.target }

// Write writes to the temporary file (buffered).
func (f *File) Write(p []byte) (int, error) {
	if f.done {
		return 0, pathErr("write", f.target, "", os.ErrClosed)
	}
	n, err := f.w.Write(p)
	return n, pathErr("write", f.target, f.tmp, err)
}

// Commit flushes and fsyncs the temporary file, renames it over the target
// and fsyncs the directory. On error the target is untouched (or, if only
// the final directory fsync failed, already replaced) and the temporary
// file removed. A File is finished after Commit; a second Commit is an
// error, a later Abort does nothing.
func (f *File) Commit() error {
	if f.done {
		return pathErr("commit", f.target, "", os.ErrClosed)
	}
	f.done = true
	defer f.stop()
	err := f.w.Flush()
	if err == nil && f.tmp != "" {
		err = f.f.Sync()
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if f.tmp == "" {
		return pathErr("write", f.target, "", err)
	}
	if err != nil {
		os.Remove(f.tmp)
		return pathErr("write", f.target, f.tmp, err)
	}
	if err := os.Rename(f.tmp, f.target); err != nil {
		os.Remove(f.tmp)
		return pathErr("replace", f.target, f.tmp, err)
	}
	return pathErr("sync directory of", f.target, "", syncDir(filepath.Dir(f.target)))
}

// Abort drops the temporary file and leaves the target untouched. It is
// idempotent and does nothing after Commit, so `defer f.Abort()` is right
// after a successful Create.
func (f *File) Abort() error {
	if f == nil || f.done {
		return nil
	}
	f.done = true
	defer f.stop()
	err := f.f.Close()
	if f.tmp != "" {
		if rerr := os.Remove(f.tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = rerr
		}
	}
	return pathErr("abort", f.target, f.tmp, err)
}

// WriteFile replaces path with data atomically (see [Create]): after a crash
// path holds either its old content or data, never a mix, and no temporary
// file remains.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return WriteFunc(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc replaces path atomically with what write writes (see [Create]);
// when write fails, its error is returned and path is untouched.
func WriteFunc(path string, perm os.FileMode, write func(w io.Writer) error) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// fileTarget is the file Create(path) replaces (symlinks followed), or
// device true for an existing non-regular file written in place.
func fileTarget(path string) (target string, device bool, err error) {
	if path == "" {
		return "", false, pathErr("create", path, "", fmt.Errorf("%w: empty path", ErrNotFile))
	}
	if namesDir(path) {
		return "", false, pathErr("create", path, "", fmt.Errorf("%w: it names a directory", ErrNotFile))
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return "", false, pathErr("create", path, "", fmt.Errorf("%w: it is a directory", ErrNotFile))
	case err == nil && !fi.Mode().IsRegular():
		return path, true, nil
	case err == nil:
		real, err := filepath.EvalSymlinks(path)
		return real, false, err
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, err
	}
	p, err := followDangling(path)
	if err != nil {
		return "", false, err
	}
	if err := parentIsDir(p); err != nil {
		return "", false, pathErr("create", path, "", err)
	}
	return p, false, nil
}

// namesDir reports whether path is a directory by its spelling alone: it
// ends in a separator, or its last element is "." or "..".
func namesDir(path string) bool {
	if strings.HasSuffix(path, string(filepath.Separator)) {
		return true
	}
	b := filepath.Base(path)
	return b == "." || b == ".." || b == string(filepath.Separator)
}

// parentIsDir checks that the directory a new file p goes into exists.
func parentIsDir(p string) error {
	parent := filepath.Dir(p)
	pi, err := os.Stat(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the folder %s does not exist: %w", parent, err)
	}
	if err != nil {
		return err
	}
	if !pi.IsDir() {
		return fmt.Errorf("%s is not a folder: %w", parent, ErrNotDir)
	}
	return nil
}

// followDangling follows the symlink chain at p whose end does not exist
// (os.Create creates that end); p itself when it is no symlink.
func followDangling(p string) (string, error) {
	for i := 0; ; i++ {
		li, err := os.Lstat(p)
		if err != nil || li.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		if i == 40 {
			return "", &os.PathError{Op: "create", Path: p, Err: syscall.ELOOP}
		}
		l, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(filepath.Dir(p), l)
		}
		p = l
	}
}

// tempMaxBase caps the part of a target's name copied into its temporary
// names, so that ".NAME.tmp-PID-RANDOM" stays within NAME_MAX (255).
const tempMaxBase = 200

// tempPrefix is ".NAME.tmp-" for a target named base.
func tempPrefix(base string) string {
	if len(base) > tempMaxBase {
		base = base[:tempMaxBase]
	}
	return "." + base + ".tmp-"
}

// tempName is a fresh temporary name for base in dir: ".NAME.tmp-PID-RANDOM".
func tempName(dir, base string) string {
	return filepath.Join(dir, tempPrefix(base)+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(uint64(rand.Uint32()), 10))
}

// createTemp creates a new temporary file for base in dir.
func createTemp(dir, base string, perm os.FileMode) (*os.File, string, error) {
	for range 1000 {
		name := tempName(dir, base)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, err
	}
	return nil, "", fmt.Errorf("no free temporary name in %s: %w", dir, fs.ErrExist)
}

// syncDir fsyncs a directory, so that a rename in it survives a crash.
// Filesystems that cannot sync a directory (EINVAL) are not an error.
func syncDir(dir string) error {
	if err := fsync(dir); !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// fsync opens the file or directory p and fsyncs it.
func fsync(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// pathErr is err as an *os.PathError on the target path (nil for nil): an
// error about the temporary file tmp is reported as one about the target,
// with the underlying cause kept (errors.Is(err, syscall.ENOSPC) holds).
func pathErr(op, target, tmp string, err error) error {
	if err == nil {
		return nil
	}
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case tmp != "" && errors.As(err, &pe) && pe.Path == tmp:
		err = pe.Err
	case tmp != "" && errors.As(err, &le) && le.Old == tmp:
		err = le.Err
	case errors.As(err, &pe) && pe.Path == target:
		return err
	}
	return &os.PathError{Op: op, Path: target, Err: err}
}
