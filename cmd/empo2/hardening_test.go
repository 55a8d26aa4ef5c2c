package main

// Regression tests of the CLI's audit: global flags after the command, help
// texts, one flag vocabulary, and bad input that gives a clear error (never
// a crash) and never loses data.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/memstore"
)

// 9.2: global flags after the command name.
func TestGlobalFlagsAfterCommand(t *testing.T) {
	out, stderr, err := runCLI(t, "version", "--log-level", "debug")
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "empo2 ")
	_, stderr, err = runCLI(t, "version", "--log-level", "loud")
	require.Error(t, err, "a bad --log-level after the command was not parsed")
	assert.Contains(t, stderr, "--log-level")
	db := filepath.Join(t.TempDir(), "m.db")
	_, stderr, err = runCLI(t, "memory", "add", "--db", db, "-n", "a/0", "--content", "tip", "--log-format", "json", "--log-level", "debug")
	require.NoError(t, err, stderr)
	// permuteArgs in-process: the global flag moves in front of the command.
	got := permuteArgs(newApp(), []string{"empo2", "model", "info", "x.gguf", "--log-level", "warn", "--json"})
	assert.Equal(t, []string{"empo2", "--log-level", "warn", "model", "info", "--json", "x.gguf"}, got)
}

// 9.2: --help texts: no flag shows two defaults, placeholders are words
// (urfave/cli takes `backquoted` text as the placeholder), no "(default: 0)"
// after a text that says what an unset flag means.
func TestHelpTexts(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	var helps [][]string
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string{}, path...), c.Name)
			helps = append(helps, append(append([]string{}, p...), "--help"))
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	helps = append(helps, []string{"--help"})
	twoDefaults := regexp.MustCompile(`\(default[^)]*\).*\(default`)
	for _, args := range helps {
		if args[0] == "help" {
			continue
		}
		out, stderr, err := runCLI(t, args...)
		require.NoError(t, err, "%v: %s", args, stderr)
		for _, l := range strings.Split(out, "\n") {
			assert.False(t, twoDefaults.MatchString(l), "%v: two defaults: %s", args, l)
			assert.NotRegexp(t, `unset: random.*default: 0`, l, "%v", args)
			assert.NotContains(t, l, "--backend make cuda", "%v", args)
		}
	}
	out, _, _ := runCLI(t, "--help")
	assert.Contains(t, out, "--backend FILE")
	out, _, _ = runCLI(t, "generate", "--help")
	assert.Contains(t, out, "(default: random)")
	out, _, _ = runCLI(t, "memory", "add", "--help")
	assert.Regexp(t, `--cap value .*\(default: the recorded cap`, out)
}

// 9.2: log lines carry no colours when stderr is not a terminal, and
// durations carry units.
func TestLogsPlainWithUnits(t *testing.T) {
	_, stderr, err := runCLI(t, "model", "init", "--out", filepath.Join(t.TempDir(), "m.gguf"))
	require.NoError(t, err, stderr)
	assert.NotContains(t, stderr, "\x1b[", "ANSI escapes in a pipe")
	assert.Regexp(t, `took=[0-9.]+(ns|µs|ms|s|m[0-9.]+s)\b`, stderr)
}

// 9.3: one vocabulary: a short flag means one thing in every command, the
// model and output files are -m/--model and -o/--out, tensor types --dtype.
func TestFlagVocabulary(t *testing.T) {
	short := map[string]string{} // "n" -> "namespace"
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := path + " " + c.Name
			for _, f := range c.Flags {
				names := f.Names()
				long := names[0]
				for _, n := range names[1:] {
					if len(n) == 1 {
						if prev, ok := short[n]; ok && prev != long {
							t.Errorf("%s: -%s is --%s here and --%s elsewhere", p, n, long, prev)
						}
						short[n] = long
					}
				}
				switch long {
				case "model":
					assert.Contains(t, names, "m", "%s --model", p)
				case "out":
					assert.Contains(t, names, "o", "%s --out", p)
				case "type":
					t.Errorf("%s: --type: the tensor type flag is --dtype", p)
				}
			}
			walk(p, c.Subcommands)
		}
	}
	walk("empo2", newApp().Commands)
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "base.gguf", nil)
	a := filepath.Join(dir, "a.gguf")
	_, stderr, err := runCLI(t, "lora", "init", "-m", model, "-o", a, "--dtype", "f16")
	require.NoError(t, err, stderr)
	_, stderr, err = runCLI(t, "export", "-m", model, "--lora", a, "-o", filepath.Join(dir, "b.gguf"), "--type", "f16")
	require.NoError(t, err, "the old spelling --type still works: %s", stderr)
}

// 9.4: prune refuses ages that would select everything; --dry-run deletes nothing.
func TestMemoryPruneGuards(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	for i := 0; i < 3; i++ {
		memCLI(t, "memory", "add", "--db", db, "-n", "a/0", "--content", fmt.Sprintf("tip %d", i))
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, b := range []string{"-72h", "0s", "0", future} {
		memCLIFail(t, "--before", "memory", "prune", "--db", db, "--before", b)
	}
	out := memCLI(t, "memory", "prune", "--db", db, "--before", "1ns", "--dry-run")
	assert.Contains(t, out, "would remove 3 entries")
	assert.Contains(t, memCLI(t, "memory", "stats", "--db", db), "entries    3 in 1")
	out = memCLI(t, "memory", "prune", "--db", db, "--before", "72h")
	assert.Contains(t, out, "removed 0 entries")
	_, err := parseBefore("-72h", time.Now())
	assert.Error(t, err)
}

// 9.4: export never writes over its own database (or its WAL/SHM), however
// the path is spelled; model init never over its corpus.
func TestExportRefusesOwnDatabase(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "m.db")
	memCLI(t, "memory", "add", "--db", db, "-n", "a/0", "--content", "tip")
	before, err := os.ReadFile(db)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(db, filepath.Join(dir, "link.db")))
	require.NoError(t, os.Symlink(dir, filepath.Join(dir, "d")))
	rel, err := filepath.Rel(mustWd(t), db)
	require.NoError(t, err)
	for _, out := range []string{db, filepath.Join(dir, "link.db"), filepath.Join(dir, "d", "m.db"), rel, db + "-wal", db + "-shm", filepath.Join(dir, "d", "m.db-wal")} {
		memCLIFail(t, "would destroy", "memory", "export", "--db", db, "--out", out)
	}
	after, err := os.ReadFile(db)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.NotEmpty(t, memCLI(t, "memory", "export", "--db", db))

	corpus := filepath.Join(dir, "corpus.txt")
	text := strings.Repeat("the quick brown fox jumps over the lazy dog\n", 50)
	require.NoError(t, os.WriteFile(corpus, []byte(text), 0o644))
	memCLIFail(t, "--corpus", "model", "init", "--out", filepath.Join(dir, "d", "corpus.txt"), "--corpus", corpus)
	got, err := os.ReadFile(corpus)
	require.NoError(t, err)
	assert.Equal(t, text, string(got))
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	require.NoError(t, err)
	return wd
}

// 9.4: read commands work on a database that cannot be written (as an
// unprivileged user when the tests run as root).
func TestMemoryReadOnlyDatabase(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "m.db")
	memCLI(t, "memory", "add", "--db", db, "-n", "a/0", "--content", "open the door to the kitchen")
	memCLI(t, "memory", "add", "--db", db, "-n", "a/0", "--content", "heat the water")
	bin := binPath
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// root writes anyway: run the binary as nobody, on a copy it can
		// read and execute but not write.
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		for p := dir; p != "/" && p != "."; p = filepath.Dir(p) {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			if fi.Mode().Perm()&0o005 != 0o005 {
				require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o005))
			}
		}
		b, err := os.ReadFile(binPath)
		require.NoError(t, err)
		bin = filepath.Join(dir, "empo2")
		require.NoError(t, os.WriteFile(bin, b, 0o755))
	}
	require.NoError(t, os.Chmod(db, 0o444))
	require.NoError(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String() + errb.String(), err
	}
	for _, args := range [][]string{
		{"memory", "stats", "--db", db},
		{"memory", "list", "--db", db},
		{"memory", "search", "--db", db, "-n", "a/0", "--query", "kitchen door", "--threshold", "0.1"},
		{"memory", "export", "--db", db},
		{"memory", "prune", "--db", db, "--keep", "1", "--dry-run"},
	} {
		out, err := run(args...)
		assert.NoError(t, err, "%v: %s", args, out)
		assert.NotContains(t, out, "readonly")
	}
	out, err := run("memory", "add", "--db", db, "-n", "a/0", "--content", "x")
	assert.Error(t, err, "a write to a read-only database succeeded: %s", out)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		assert.False(t, strings.HasSuffix(e.Name(), "-shm") || strings.HasSuffix(e.Name(), "-wal"), "left %s", e.Name())
	}
}

// 9.4: --cap -1, invalid UTF-8, and imports into a new database.
func TestMemoryAddImportGuards(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "m.db")
	memCLIFail(t, "--cap -1", "memory", "add", "--db", db, "-n", "a/0", "--content", "x", "--cap", "-1")
	memCLIFail(t, "utf-8", "memory", "add", "--db", db, "-n", "a/0", "--content", "caf\xe9")
	_, err := os.Stat(db)
	assert.True(t, os.IsNotExist(err), "a refused add left a database file")

	// Hand-written records without embeddings, into a new database: embedded
	// with the default hash embedder (docs/memory.md).
	recs := filepath.Join(dir, "recs.jsonl")
	require.NoError(t, os.WriteFile(recs, []byte(`{"namespace":"a/0","content":"open the door to the kitchen","score":5}
{"namespace":"a/0","content":"heat the water on the stove","score":9}
`), 0o644))
	out := memCLI(t, "memory", "import", "--db", db, recs)
	assert.Contains(t, out, "added 2")
	out = memCLI(t, "memory", "search", "--db", db, "-n", "a/0", "--query", "open the door to the kitchen", "--json")
	assert.Contains(t, out, `"count": `)
	assert.Contains(t, memCLI(t, "memory", "stats", "--db", db), "hash-ngram-v1/384")

	// A failing import into a new database leaves no file behind.
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{not json\n"), 0o644))
	db2 := filepath.Join(dir, "new.db")
	memCLIFail(t, "line 1", "memory", "import", "--db", db2, bad)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		assert.False(t, strings.HasPrefix(e.Name(), "new.db"), "left %s", e.Name())
	}
}

// 9.5: the import progress bar (shown on a terminal for big inputs).
func TestImportProgressBar(t *testing.T) {
	var w bytes.Buffer
	data := bytes.Repeat([]byte("x"), progressMinBytes+1)
	r, done := progressReaderTo(bytes.NewReader(data), int64(len(data)), "importing big.jsonl", &w, true)
	n, err := bytes.NewBuffer(nil).ReadFrom(r)
	require.NoError(t, err)
	done()
	assert.Equal(t, int64(len(data)), n)
	assert.Contains(t, w.String(), "importing big.jsonl")
	w.Reset()
	r, done = progressReaderTo(bytes.NewReader(data[:10]), 10, "small", &w, true)
	bytes.NewBuffer(nil).ReadFrom(r)
	done()
	assert.Empty(t, w.String(), "a bar for a small file")
}

// 9.4: stats and list read no embedding: the peak RSS of `memory stats` and
// `memory list` on 20k × 384 entries (31 MB of embeddings) stays within a
// few MB of `empo2 version`'s, measured.
func TestMemoryStatsListMemory(t *testing.T) {
	const n, dim = 20000, 384
	db := filepath.Join(t.TempDir(), "big.db")
	s, err := memstore.Open(db, memstore.NewHashEmbedder(dim), memstore.WithCap(0))
	require.NoError(t, err)
	es := make([]memstore.Entry, n)
	for i := range es {
		v := make([]float32, dim)
		v[i%dim], v[(i/dim)%dim] = 1, 0.5
		es[i] = memstore.Entry{Content: fmt.Sprintf("tip number %d", i), Score: float64(i % 7), Embedding: v}
	}
	_, err = s.Add(context.Background(), "a/0", es)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	// ru_maxrss of a child includes its parent's RSS at the moment of exec
	// (Go execs with CLONE_VM): a fresh small helper process (this test
	// binary in rssHelper mode) starts each command, so all start equal.
	rss := func(args ...string) int64 {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), rssHelperEnv+"="+binPath)
		out, err := cmd.Output()
		require.NoError(t, err, "%v: %s", args, out)
		var kb int64
		_, err = fmt.Sscan(string(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]), &kb)
		require.NoError(t, err, "%s", out)
		return kb * 1024
	}
	base := rss("version")
	stats := rss("memory", "stats", "--db", db)
	list := rss("memory", "list", "--db", db)
	search := rss("memory", "search", "--db", db, "-n", "a/0", "--query", "tip")
	t.Logf("peak RSS: version %d MB, stats %d MB, list %d MB, search (loads the index) %d MB; embeddings %d MB",
		base>>20, stats>>20, list>>20, search>>20, n*dim*4>>20)
	assert.Less(t, stats-base, int64(n*dim*4/3), "stats read the embeddings")
	assert.Less(t, list-base, int64(n*dim*4/3), "list read the embeddings")
	assert.Greater(t, search-base, int64(n*dim*4/2), "the measurement cannot see the embeddings")
}

const rssHelperEnv = "EMPO2_TEST_RSS_OF"

// rssHelper (called from TestMain) runs the binary named by rssHelperEnv
// with the process's arguments and prints its peak RSS in KiB.
func rssHelper() {
	bin := os.Getenv(rssHelperEnv)
	if bin == "" {
		return
	}
	cmd := exec.Command(bin, os.Args[1:]...)
	cmd.Stdout = nil
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("\n%d\n", cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
	os.Exit(0)
}

// 9.4: Ctrl-C / SIGTERM during model init removes the temporary file.
func TestModelInitInterrupted(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		out := filepath.Join(dir, "big.gguf")
		cmd := exec.Command(binPath, "model", "init", "--out", out, "--layers", "8", "--hidden", "1024", "--heads", "8", "--kv-heads", "2", "--ffn", "4096", "--vocab", "1024")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		require.NoError(t, cmd.Start())
		deadline := time.Now().Add(30 * time.Second)
		found := false
		for !found && time.Now().Before(deadline) {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if fi, err := e.Info(); err == nil && strings.Contains(e.Name(), ".tmp-") && fi.Size() > 1<<20 {
					found = true
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		require.True(t, found, "no temporary file appeared")
		require.NoError(t, cmd.Process.Signal(sig))
		err := cmd.Wait()
		require.Error(t, err, "model init finished before the signal")
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			t.Errorf("%v: left %s", sig, e.Name())
		}
	}
}

// 9.5: sizes that would write tens of GB, and layers beyond llama.cpp's
// limit, are refused before anything is written; the size is told up front.
func TestModelInitSizeLimits(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.gguf")
	memCLIFail(t, "--max-size", "model", "init", "--out", out, "--hidden", "100000", "--heads", "10", "--kv-heads", "10", "--ffn", "1", "--vocab", "300")
	memCLIFail(t, "--max-size", "model", "init", "--out", out, "--max-size", "100KiB")
	memCLIFail(t, "layers 513", "model", "init", "--out", out, "--layers", "513")
	ents, _ := os.ReadDir(dir)
	assert.Empty(t, ents)
	_, stderr, err := runCLI(t, "model", "init", "--out", out, "--max-size", "10MB")
	require.NoError(t, err, stderr)
	assert.Regexp(t, `writing model.*size=`, stderr)
}

// 9.5: --max-tokens that cannot fit is an error up front; too many threads warn.
func TestGenerateBadNumbers(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "m.gguf", nil)
	start := time.Now()
	memCLIFail(t, "--max-tokens 9223372036854775807", "generate", "--model", model, "--prompt", "hi", "--max-tokens", "9223372036854775807", "--seed", "1")
	memCLIFail(t, "--max-tokens", "generate", "--model", model, "--prompt", "hi", "--max-tokens", "-3", "--seed", "1")
	assert.Less(t, time.Since(start), 20*time.Second)
	_, stderr, err := runCLI(t, "generate", "--model", model, "--prompt", "hi", "--max-tokens", "2", "--seed", "1", "--threads", fmt.Sprint(runtime.NumCPU()+1))
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "more threads than cores")
}

// 9.5: an alpha that makes the merge non-finite is refused by lora validate
// and export --merged; mixed ranks are reported as a range.
func TestLoraHugeAlphaAndMixedRank(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "base.gguf", nil)
	a := filepath.Join(dir, "a.gguf")
	loraMustCLI(t, "lora", "init", "--model", model, "--rank", "8", "--alpha", "1e30", "--random-b", "--out", a)
	loraWantFail(t, []string{"alpha", "non-finite"}, "lora", "validate", "--model", model, "--lora", a)
	merged := filepath.Join(dir, "merged.gguf")
	loraWantFail(t, []string{"alpha"}, "export", "--model", model, "--lora", a, "--merged", "--out", merged)
	_, err := os.Stat(merged)
	assert.True(t, os.IsNotExist(err))

	// Ranks 8 and 4 in one adapter.
	b := filepath.Join(dir, "b.gguf")
	loraMustCLI(t, "lora", "init", "--model", model, "--rank", "8", "--alpha", "16", "--random-b", "--out", b)
	ad, err := lora.Read(b)
	require.NoError(t, err)
	p := ad.Pairs[0]
	nb := make([]float32, p.Out*4)
	for o := 0; o < p.Out; o++ {
		copy(nb[o*4:(o+1)*4], p.B[o*p.Rank:o*p.Rank+4])
	}
	p.A, p.B, p.Rank = p.A[:4*p.In], nb, 4
	require.NoError(t, ad.Write(b, gguf.TypeF32))
	out, stderr, err := runCLI(t, "lora", "validate", "--model", model, "--lora", b)
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "rank 4-8")
	assert.NotContains(t, out, "rank 0")
}

// 9.6: export --merged keeps the base's dtype (F16 stays F16); --dtype overrides.
func TestExportMergedKeepsDType(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "f16.gguf")
	loraMustCLI(t, "model", "init", "--out", model, "--dtype", "f16")
	a := filepath.Join(dir, "a.gguf")
	loraMustCLI(t, "lora", "init", "--model", model, "--random-b", "--out", a)
	types := func(p string) map[gguf.GGMLType]int {
		f, err := gguf.Open(p)
		require.NoError(t, err)
		defer f.Close()
		m := map[gguf.GGMLType]int{}
		for _, ti := range f.Tensors {
			if strings.HasSuffix(ti.Name, "attn_q.weight") {
				m[ti.Type]++
			}
		}
		return m
	}
	m1 := filepath.Join(dir, "m1.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", a, "--merged", "--out", m1)
	assert.Equal(t, map[gguf.GGMLType]int{gguf.TypeF16: 2}, types(m1))
	b, _ := os.Stat(model)
	m, _ := os.Stat(m1)
	assert.Equal(t, b.Size(), m.Size(), "an F16 base merged into a different size")
	m2 := filepath.Join(dir, "m2.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", a, "--merged", "--out", m2, "--dtype", "f32")
	assert.Equal(t, map[gguf.GGMLType]int{gguf.TypeF32: 2}, types(m2))
}

// 9.5: env play --step-limit -1 and unknown --env-opt keys are errors.
func TestEnvBadOptions(t *testing.T) {
	memCLIFail(t, "--step-limit -1", "env", "play", "textlab", "find-living-thing", "--step-limit", "-1", "--actions", "/dev/null")
	memCLIFail(t, "--env-opt", "env", "gold", "textlab", "light-bulb", "--env-opt", "xmx=2g")
	memCLIFail(t, "unknown option", "env", "gold", "webshop", "--goal", "1", "--env-opt", "colour=red")
	memCLIFail(t, "--env-opt", "env", "list", "scienceworld", "--env-opt", "bogus=1")
}

// TestEnvOptKeysCoverRegistry keeps envOptKeys complete: every registered
// environment has an entry (its --env-opt keys are checked).
func TestEnvOptKeysCoverRegistry(t *testing.T) {
	for _, n := range environments.Names() {
		_, ok := envOptKeys[n]
		assert.True(t, ok, "environment %q has no envOptKeys entry", n)
	}
}

// 9.5: the status line counts the simulator's moves against the limit.
func TestEnvStatusCountsMoves(t *testing.T) {
	var w bytes.Buffer
	r := environments.StepResult{Observation: "ok", Info: environments.Info{"moves": 29}}
	envPrintStep(&w, "look", r, 0, 31, 30, false)
	assert.Contains(t, w.String(), "step 29/30")
	w.Reset()
	envPrintStep(&w, "look", environments.StepResult{Observation: "ok"}, 0, 3, 30, false)
	assert.Contains(t, w.String(), "step 3/30")
}
