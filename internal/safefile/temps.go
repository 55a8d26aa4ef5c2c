package safefile

import (
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// signalCleanup: an open File or Dir removes its temporary file or folder
// on SIGINT/SIGTERM.
var signalCleanup = func() *atomic.Bool { var b atomic.Bool; b.Store(true); return &b }()

// SetSignalCleanup sets whether a [File] or [Dir] being written, when
// SIGINT or SIGTERM arrives, removes its temporary file or folder and lets
// the signal end the process (the default: right for one-shot writers such
// as `model init` and `export`). A program that handles these signals
// itself in order to finish its work (`empo2 train`: finish the step,
// checkpoint, exit 0) turns it off, so that a write in progress completes
// instead of losing its file. It applies to writes started afterwards.
func SetSignalCleanup(on bool) { signalCleanup.Store(on) }

// removeOnSignal calls remove when SIGINT or SIGTERM arrives before the
// returned stop is called, and then lets the signal end the process as it
// would have (re-raised with the default action), unless another part of
// the program also handles it.
func removeOnSignal(remove func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case sig := <-ch:
			remove()
			signal.Stop(ch)
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				p.Signal(sig)
			}
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-finished
		signal.Stop(ch)
	}
}

// RemoveStaleTemps removes the temporary files and staging folders that
// writers of path left when their process died without cleaning up
// (SIGKILL, a power cut): ".NAME.tmp-PID-RANDOM" beside path whose PID is no
// longer running, and files of the older naming ".NAME.tmp-RANDOM" not
// modified for an hour. Those of running writers are left alone. [Create]
// and [CreateDir] call it; it returns the names removed.
func RemoveStaleTemps(path string) []string {
	dir, base := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	prefix := tempPrefix(base)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok || !(e.Type().IsRegular() || e.IsDir()) {
			continue
		}
		stale := false
		if pidStr, rnd, ok := strings.Cut(rest, "-"); ok {
			pid, err := strconv.Atoi(pidStr)
			if err != nil || pid <= 0 || !allDigits(rnd) {
				continue
			}
			stale = pid != os.Getpid() && !processAlive(pid)
		} else if allDigits(rest) && e.Type().IsRegular() {
			fi, err := e.Info()
			stale = err == nil && time.Since(fi.ModTime()) > time.Hour
		}
		if stale && os.RemoveAll(filepath.Join(dir, name)) == nil {
			removed = append(removed, name)
		}
	}
	return removed
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// processAlive reports whether a process with this pid exists (signal 0;
// EPERM means it exists but belongs to someone else).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
