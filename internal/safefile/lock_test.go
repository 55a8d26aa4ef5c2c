package safefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const lockChildEnv = "EMPO2_SAFEFILE_LOCK_CHILD"

// TestLockChild is the lock-holding child of TestLockBetweenProcesses
// (skipped otherwise): it takes the lock, says so and sleeps.
func TestLockChild(t *testing.T) {
	path := os.Getenv(lockChildEnv)
	if path == "" {
		t.Skip("the child process of TestLockBetweenProcesses")
	}
	l, err := TryLock(path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
	l.Close()
	os.Exit(0)
}

// TestLockBetweenProcesses: while a child holds the lock (of a lock file,
// or of a folder) TryLock is refused with ErrLocked naming the child's pid
// (for a lock file); once the child is killed with SIGKILL the lock is free.
func TestLockBetweenProcesses(t *testing.T) {
	for _, folder := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "lock")
		if folder {
			path = dir
		}
		cmd, _ := startTestChild(t, "TestLockChild", lockChildEnv+"="+path, "locked")
		_, err := TryLock(path)
		var le *LockedError
		if !errors.Is(err, ErrLocked) || !errors.As(err, &le) {
			t.Errorf("folder %v: TryLock while the child holds it: %v, want ErrLocked", folder, err)
		} else if want := cmd.Process.Pid; !folder && (le.PID != want || !strings.Contains(err.Error(), fmt.Sprint(want))) {
			t.Errorf("lock file: %q names pid %d, want the child's %d", err, le.PID, want)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		l, err := TryLock(path)
		if err != nil {
			t.Fatalf("folder %v: the lock of a killed process is still held: %v", folder, err)
		}
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestLockInProcess: a second lock of the same path in one process is
// refused too (flock locks belong to open files); Close releases it and is
// idempotent.
func TestLockInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	l, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(mustRead(t, path)); got != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file holds %q, want our pid", got)
	}
	var le *LockedError
	if _, err := TryLock(path); !errors.As(err, &le) || le.PID != os.Getpid() {
		t.Errorf("second TryLock: %v, want a LockedError with our pid", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	l2, err := TryLock(path)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	l2.Close()
	var nilLock *Lock
	if err := nilLock.Close(); err != nil {
		t.Error(err)
	}
}
