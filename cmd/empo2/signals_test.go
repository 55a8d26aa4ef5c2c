package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Child-process tests of SIGINT and SIGTERM: the commands that write close
// their memory database and their outputs (nothing half-written, no
// -wal/-shm left) and exit 128 + the signal with a one-line summary.

// child is a running empo2 whose stderr (and stdout) are recorded.
type child struct {
	cmd            *exec.Cmd
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	seen           chan struct{} // closed when stderr or stdout holds the awaited text
	await          string
	once           sync.Once
	done           chan error
}

type lockedWriter struct {
	c *child
	b *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	n, err := w.b.Write(p)
	if strings.Contains(w.c.stderr.String()+w.c.stdout.String(), w.c.await) {
		w.c.once.Do(func() { close(w.c.seen) })
	}
	return n, err
}

// startChild starts empo2 args in dir and notes when await appears on its
// output; stdin, when not nil, is its standard input.
func startChild(t *testing.T, dir, await string, stdin io.Reader, args ...string) *child {
	t.Helper()
	c := &child{seen: make(chan struct{}), await: await, done: make(chan error, 1)}
	c.cmd = exec.Command(binPath, args...)
	c.cmd.Dir = dir
	c.cmd.Stdin = stdin
	c.cmd.Stdout, c.cmd.Stderr = lockedWriter{c, &c.stdout}, lockedWriter{c, &c.stderr}
	c.cmd.Env = append(os.Environ(), "EMPO2_LOG_LEVEL=info")
	require.NoError(t, c.cmd.Start())
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
		}
	})
	return c
}

// interrupt waits (at most 60 s) for the awaited text, or for the child to
// end, then sends sig and returns the exit code (-1: killed by a signal)
// and the output.
func (c *child) interrupt(t *testing.T, sig syscall.Signal) (code int, stdout, stderr string) {
	t.Helper()
	var err error
	select {
	case <-c.seen:
		require.NoError(t, c.cmd.Process.Signal(sig))
		select {
		case err = <-c.done:
		case <-time.After(60 * time.Second):
			_ = c.cmd.Process.Kill()
			t.Fatalf("%s did not end within 60 s of the signal", c.cmd.Args)
		}
	case err = <-c.done:
		t.Errorf("%s ended before %q appeared", c.cmd.Args, c.await)
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Signal(sig) // the old binary may never log it
		err = <-c.done
		t.Errorf("%q did not appear within 60 s", c.await)
	}
	code = 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return code, c.stdout.String(), c.stderr.String()
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestEvalSignals: eval used to die at SIGTERM with the memory's
// memory.db-wal and -shm left beside it; at SIGINT or SIGTERM it now
// closes the memory and writes nothing, exiting 130 or 143 with one line.
func TestEvalSignals(t *testing.T) {
	model := llmTestModel(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		_, stderr, err := runCLIIn(t, dir, "memory", "add", "--db", "mem.db", "-n", "melt/0", "--key", "k", "--content", "a tip", "--score", "40")
		require.NoError(t, err, stderr)
		c := startChild(t, dir, "eval plan:", nil, "eval", "--model", model, "--memory", "on", "--memory-db", "mem.db", "--threads", "1",
			"--parallel", "2", "-o", "r.json")
		code, _, stderr := c.interrupt(t, sig)
		assert.Equal(t, 128+int(sig), code, stderr)
		assert.Contains(t, lastLine(stderr), "eval interrupted after ", stderr)
		assert.Contains(t, lastLine(stderr), map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig])
		assert.Equal(t, []string{"./", "mem.db"}, names(snapshot(t, dir)), "no -wal/-shm, no r.json, no temporary file")
	}
}

// TestSFTSignal: SIGINT used to kill sft; it now stops after the step in
// progress, writes the checkpoint and exits 130 naming it, and --resume
// continues from it.
func TestSFTSignal(t *testing.T) {
	dir := sftDir(t)
	c := startChild(t, dir, "sft data", nil, "sft", "-m", "m.gguf", "--data", "d.jsonl", "-o", "a.gguf", "--rank", "4",
		"--epochs", "300", "--batch-tokens", "1", "--threads", "1")
	code, _, stderr := c.interrupt(t, syscall.SIGINT)
	assert.Equal(t, 130, code, stderr)
	assert.Contains(t, lastLine(stderr), "sft interrupted after step ", stderr)
	assert.Contains(t, lastLine(stderr), "checkpoint a.state.gguf; continue with --resume (SIGINT)")
	files := names(snapshot(t, dir))
	assert.Contains(t, files, "a.state.gguf")
	for _, f := range files {
		assert.False(t, strings.Contains(f, ".tmp"), "temporary file %s left", f)
	}
	out, stderr, err := runCLIIn(t, dir, "sft", "-m", "m.gguf", "--data", "d.jsonl", "-o", "a.gguf", "--rank", "4",
		"--epochs", "1", "--batch-tokens", "1", "--threads", "1", "--resume")
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "wrote a.gguf")
}

// TestEnvDemosSignal: SIGTERM during env demos leaves neither the output
// nor a temporary file and exits 143 with one line.
func TestEnvDemosSignal(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, "env demos: playing", nil, "env", "demos", "textlab", "--split", "train", "--kind", "explore",
		"--simplifications", "easy", "--tip-records", "2", "-o", "d.jsonl", "--text", "t.txt")
	code, _, stderr := c.interrupt(t, syscall.SIGTERM)
	assert.Equal(t, 143, code, stderr)
	assert.Contains(t, lastLine(stderr), "env demos interrupted after ", stderr)
	assert.Contains(t, lastLine(stderr), "d.jsonl not written (SIGTERM)")
	assert.Equal(t, []string{"./"}, names(snapshot(t, dir)))
}

// TestEnvPlaySignal: Ctrl-C in env play used to end it without the final
// score line; the line is printed and the exit status is 130.
func TestEnvPlaySignal(t *testing.T) {
	pr, pw, err := os.Pipe() // a file: exec.Cmd.Wait does not wait on it
	require.NoError(t, err)
	defer pw.Close()
	c := startChild(t, t.TempDir(), "Task:", pr, "env", "play", "textlab", "melt", "--variation", "1")
	pr.Close()
	_, err = io.WriteString(pw, "look around\n")
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	code, stdout, stderr := c.interrupt(t, syscall.SIGINT)
	assert.Equal(t, 130, code, stderr)
	assert.Regexp(t, `final score: \d+ after [01] actions \(done: false\)`, lastLine(stdout))
	assert.Contains(t, lastLine(stderr), "env play interrupted (SIGINT)")
}

// writeLongRun writes a run directory of steps training steps (metrics
// only): with 1000 steps each picture takes a few hundred milliseconds to
// draw at the default dpi, so that a signal sent at the first picture finds
// report still working, in well under 100 MB.
func writeLongRun(t *testing.T, dir string, seed, steps int) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var m strings.Builder
	for s := 1; s <= steps; s++ {
		fmt.Fprintf(&m, `{"step":%d,"mode":"on-policy","seed":%d,"score_mean":%d,"success_rate":%g,"loss":%g,"t_rollout":1.5,"t_update":0.5}`+"\n",
			s, seed, (7*s+seed)%100, float64(s%10)/10, 0.1+float64(s%3))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(fmt.Sprintf("preset: empo2\nseed: %d\nsteps: %d\n", seed, steps)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(m.String()), 0o644))
}

// TestReportSignal: SIGINT while report draws (awaited at its first
// picture) leaves complete pictures and no report.html, and exits 130 with
// one line naming how many pictures were drawn.
func TestReportSignal(t *testing.T) {
	dir := t.TempDir()
	var runs []string
	for s := 1; s <= 2; s++ {
		r := filepath.Join(dir, fmt.Sprintf("run-s%d", s))
		writeLongRun(t, r, s, 1000)
		runs = append(runs, r)
	}
	out := filepath.Join(dir, "report")
	c := startChild(t, dir, "report: drawing", nil, append(append([]string{"report"}, runs...), "--out", out, "--format", "png,svg")...)
	code, _, stderr := c.interrupt(t, syscall.SIGINT)
	assert.Equal(t, 130, code, stderr)
	assert.Regexp(t, `report interrupted after [1-9]\d* of \d+ pictures`, lastLine(stderr), stderr)
	_, err := os.Stat(filepath.Join(out, "report.html"))
	assert.True(t, os.IsNotExist(err), "no report.html")
	for _, f := range names(snapshot(t, out)) {
		assert.False(t, strings.Contains(f, ".tmp"), "temporary file %s left", f)
	}
}
