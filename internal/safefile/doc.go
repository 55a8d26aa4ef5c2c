// Package safefile writes files so that a crash, a kill or a full disk never
// leaves a half-written or destroyed file behind, and keeps a command from
// writing over its own inputs. It is pure Go (Linux system calls through
// package syscall and golang.org/x/sys/unix) and imports nothing of empo2.
//
// Conventions:
//
//   - A file is replaced, never rewritten in place: [Create] (streaming) and
//     [WriteFile] (one shot) write a temporary file ".NAME.tmp-PID-RANDOM"
//     in the target's directory, fsync it, rename it over the target and
//     fsync the directory, so that after a crash the path holds either the
//     old file or the complete new one. On any error, and on SIGINT or
//     SIGTERM while a file is open (see [SetSignalCleanup]), the temporary
//     file is removed; temporary files of writers that died by SIGKILL are
//     removed by the next write to the same path ([RemoveStaleTemps]).
//   - A folder a writer produces (a PEFT or transformers export) is staged
//     beside it and renamed into place ([CreateDir]); see [Dir.Commit] for
//     how an existing folder is replaced.
//   - Before a command opens anything for writing it calls [CheckOutputs]
//     with its outputs and inputs; symlinks and hard links are resolved, so
//     no spelling of a path lets an output replace an input.
//   - [TryLock] takes an exclusive advisory lock (flock) that the kernel
//     releases when the process dies, so a lock is never stale after kill -9.
//   - Errors are the underlying ones (errors.Is(err, syscall.ENOSPC) holds)
//     wrapped with the target path; the guard's refusals wrap the sentinels
//     [ErrOutputIsInput], [ErrOutputsCollide], [ErrNotFile] and [ErrNotDir],
//     a held lock [ErrLocked].
package safefile
