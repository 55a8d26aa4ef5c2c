package safefile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked: another process (or another Lock of this one) holds the lock.
var ErrLocked = errors.New("locked by another process")

// LockedError is TryLock's refusal; it wraps ErrLocked.
type LockedError struct {
	Path string
	PID  int // the holder's process id; 0 when unknown (a folder lock, or a holder that has not written it yet)
}

func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("%s is in use: locked by process %d", e.Path, e.PID)
	}
	return fmt.Sprintf("%s is in use: %v", e.Path, ErrLocked)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// Lock is an exclusive advisory lock (flock(2)) held until Close or until
// the process ends in any way: the kernel releases it when the process
// dies, so a lock is never left stale by kill -9. Processes that do not
// call TryLock are not stopped by it.
type Lock struct {
	f    *os.File
	path string
	pid  bool // the lock file holds our pid
}

// TryLock takes the lock of path without waiting, or returns a
// *[LockedError] (errors.Is(err, ErrLocked)) naming the holder's pid. A path
// that is an existing folder is locked itself (the holder's pid is then
// unknown); any other path is a lock file, created if missing (0644), into
// which the holder writes its pid. The lock file is never removed (removing
// it would let two processes lock two different files of one name).
//
//	l, err := safefile.TryLock(filepath.Join(runDir, "lock"))
//	if err != nil {
//		return err // "DIR/lock is in use: locked by process 1234"
//	}
//	defer l.Close()
func TryLock(path string) (*Lock, error) {
	var f *os.File
	var err error
	fi, serr := os.Stat(path)
	isDir := serr == nil && fi.IsDir()
	if isDir {
		f, err = os.Open(path)
	} else {
		// no O_TRUNC: the file holds the holder's pid until we hold the lock
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	}
	if err != nil {
		return nil, err
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			le := &LockedError{Path: path}
			if !isDir {
				le.PID = readPID(path)
			}
			return nil, le
		}
		return nil, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	l := &Lock{f: f, path: path, pid: !isDir}
	if l.pid {
		err := f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		if err != nil {
			f.Close()
			return nil, &os.PathError{Op: "lock", Path: path, Err: err}
		}
	}
	return l, nil
}

// Close releases the lock (and clears the pid from the lock file). It is
// idempotent and nil-safe.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	var err error
	if l.pid {
		err = l.f.Truncate(0)
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	if err != nil {
		return &os.PathError{Op: "unlock", Path: l.path, Err: err}
	}
	return nil
}

// flock is flock(2) on f, retried when a signal interrupts it.
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if ferr = syscall.Flock(int(fd), how); !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}

// readPID reads the pid a holder wrote into a lock file (0 if none).
func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
