package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/modelgen"
)

// memCLI runs the binary and fails the test on a non-zero exit.
func memCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := runCLI(t, args...)
	require.NoError(t, err, "empo2 %s\nstderr: %s", strings.Join(args, " "), stderr)
	return out
}

// memCLIFail runs the binary, expecting failure with stderr containing sub.
func memCLIFail(t *testing.T, sub string, args ...string) {
	t.Helper()
	_, stderr, err := runCLI(t, args...)
	require.Error(t, err, "empo2 %s succeeded", strings.Join(args, " "))
	assert.Contains(t, strings.ToLower(stderr), strings.ToLower(sub), "empo2 %s", strings.Join(args, " "))
	assert.NotContains(t, stderr, "goroutine", "panic")
	assert.NotContains(t, stderr, "panic:")
}

// TestMemoryCLIBadInput: every bad argument exits non-zero with a message
// naming the problem, never a panic, and read commands create no file.
func TestMemoryCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "mem.db")
	memCLI(t, "memory", "add", "--db", db, "-n", "boil/3", "--content", "heat the pot on the stove", "--score", "80")

	// Without --db (and without EMPO2_MEMORY_DB in the environment).
	for _, sub := range []string{"stats", "list", "search", "add", "export", "import", "prune", "reset"} {
		cmd := exec.Command(binPath, "memory", sub)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "EMPO2_MEMORY_DB=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		require.Error(t, err, "memory %s without --db succeeded", sub)
		assert.Regexp(t, `Required flags? "db[",]`, stderr.String(), "memory %s", sub)
		assert.NotContains(t, stderr.String(), "panic:")
	}
	memCLIFail(t, "--db is empty", "memory", "search", "--db", "", "-n", "boil/3", "--query", "stove")
	memCLIFail(t, "--db is empty", "memory", "add", "--db", " ", "-n", "boil/3", "--content", "x")

	search := func(extra ...string) []string {
		return append([]string{"memory", "search", "--db", db, "-n", "boil/3", "--query", "stove"}, extra...)
	}
	memCLIFail(t, "--k 0: want a positive number", search("--k", "0")...)
	memCLIFail(t, "--k -3: want a positive number", search("--k", "-3")...)
	memCLIFail(t, `invalid value "abc" for flag -k`, search("--k", "abc")...)
	memCLIFail(t, "--threshold 1.5", search("--threshold", "1.5")...)
	memCLIFail(t, "--threshold -2", search("--threshold", "-2")...)
	memCLIFail(t, "--threshold NaN", search("--threshold", "NaN")...)
	memCLIFail(t, "--query is empty", "memory", "search", "--db", db, "-n", "boil/3", "--query", "")
	memCLIFail(t, "--query is empty", "memory", "search", "--db", db, "-n", "boil/3", "--query", "  \t ")
	memCLIFail(t, "--namespace is empty", "memory", "search", "--db", db, "-n", "", "--query", "stove")
	memCLIFail(t, "--content is empty", "memory", "add", "--db", db, "-n", "boil/3", "--content", " ")
	memCLIFail(t, "--namespace is empty", "memory", "add", "--db", db, "-n", "", "--content", "x")
	memCLIFail(t, "--score NaN", "memory", "add", "--db", db, "-n", "boil/3", "--content", "x", "--score", "NaN")
	memCLIFail(t, "--keep -1", "memory", "prune", "--db", db, "--keep", "-1")
	// Bad arguments are refused before a database is created.
	missing := filepath.Join(dir, "missing.db")
	memCLIFail(t, "--k 0", "memory", "search", "--db", missing, "-n", "boil/3", "--query", "stove", "--k", "0")
	memCLIFail(t, "--content is empty", "memory", "add", "--db", missing, "-n", "boil/3", "--content", "")
	memCLIFail(t, "no such memory database", "memory", "search", "--db", missing, "-n", "boil/3", "--query", "stove")
	memCLIFail(t, "no such memory database", "memory", "export", "--db", missing)
	memCLIFail(t, "no such memory database", "memory", "prune", "--db", missing, "--keep", "1")
	memCLIFail(t, "no such memory database", "memory", "reset", "--db", missing, "--all")
	_, err := os.Stat(missing)
	assert.True(t, os.IsNotExist(err), "a refused command created %s", missing)
	// A directory, a truncated database, an unreadable JSONL file.
	memCLIFail(t, "not an empo2 memory database", "memory", "stats", "--db", dir)
	raw, err := os.ReadFile(db)
	require.NoError(t, err)
	trunc := filepath.Join(dir, "trunc.db")
	require.NoError(t, os.WriteFile(trunc, raw[:len(raw)/2+100], 0o644))
	memCLIFail(t, "corrupt", "memory", "stats", "--db", trunc)
	memCLIFail(t, "no such file", "memory", "import", "--db", db, filepath.Join(dir, "nope.jsonl"))
	// The good database is untouched by all of the above.
	var st memstore.Stats
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "stats", "--db", db, "--json", "--check")), &st))
	assert.Equal(t, 1, st.Entries)
}

func TestMemoryCLI(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "mem.db")
	add := func(ns, content, key, score string) string {
		return memCLI(t, "memory", "add", "--db", db, "-n", ns, "--content", content, "--key", key, "--score", score, "--step", "7", "--episode", "ep1")
	}
	assert.Contains(t, add("boil/3", "heat the pot of water on the stove", "You are in the kitchen with a stove", "80"), "added 1")
	add("boil/3", "focus on the thermometer first", "You are in the kitchen, a thermometer is here", "-20")
	add("boil/3", "go to the greenhouse", "You are outside near the greenhouse door", "100")
	assert.Contains(t, add("boil/3", "go to the greenhouse", "anything", "5"), "duplicate")
	add("melt/0", "put ice in the pot", "You are in the kitchen", "10")

	var st memstore.Stats
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "stats", "--db", db, "--json", "--check")), &st))
	assert.Equal(t, 4, st.Entries)
	assert.Equal(t, "hash-ngram-v1/384", st.Embedder)
	require.Len(t, st.Namespaces, 2)
	assert.Equal(t, "boil/3", st.Namespaces[0].Name)
	assert.Equal(t, 3, st.Namespaces[0].Count)
	assert.Equal(t, 100.0, st.Namespaces[0].MaxScore)
	table := memCLI(t, "memory", "stats", "--db", db)
	assert.Contains(t, table, "NAMESPACE")
	assert.Contains(t, table, "melt/0")

	// Search: the two kitchen tips match, the greenhouse one does not;
	// ranked by score; count and reward as the trainer sees them.
	var sr struct {
		Count           int              `json:"count"`
		IntrinsicReward float64          `json:"intrinsic_reward"`
		Entries         []memstore.Match `json:"entries"`
	}
	out := memCLI(t, "memory", "search", "--db", db, "-n", "boil/3", "--query", "You are in the kitchen", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &sr))
	assert.Equal(t, 2, sr.Count)
	require.Len(t, sr.Entries, 2)
	assert.Equal(t, "heat the pot of water on the stove", sr.Entries[0].Content)
	assert.Equal(t, "focus on the thermometer first", sr.Entries[1].Content)
	assert.Equal(t, int64(7), sr.Entries[0].Step)
	assert.Equal(t, "ep1", sr.Entries[0].Episode)
	assert.InDelta(t, 1.0/3, sr.IntrinsicReward, 1e-9)
	out = memCLI(t, "memory", "search", "--db", db, "-n", "boil/3", "--query", "You are in the kitchen", "--json", "--by-similarity", "--k", "1", "--threshold", "-1")
	require.NoError(t, json.Unmarshal([]byte(out), &sr))
	assert.Equal(t, 3, sr.Count)
	require.Len(t, sr.Entries, 1)
	assert.Greater(t, sr.Entries[0].Similarity, float32(0.5))
	out = memCLI(t, "memory", "search", "--db", db, "-n", "boil/3", "--query", "You are in the kitchen")
	assert.Contains(t, out, "2 entries above 0.5")
	assert.Contains(t, out, "SIMILARITY")

	var list []memstore.Entry
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "list", "--db", db, "--json", "--limit", "2")), &list))
	require.Len(t, list, 2)
	assert.Equal(t, "put ice in the pot", list[0].Content, "newest first")
	assert.Contains(t, memCLI(t, "memory", "list", "--db", db, "-n", "boil/3"), "go to the greenhouse")

	// Export, import into a new database: same search results.
	jl := filepath.Join(dir, "mem.jsonl")
	memCLI(t, "memory", "export", "--db", db, "--out", jl)
	raw, err := os.ReadFile(jl)
	require.NoError(t, err)
	assert.Equal(t, 4, strings.Count(string(raw), "\n"))
	db2 := filepath.Join(dir, "copy.db")
	assert.Contains(t, memCLI(t, "memory", "import", "--db", db2, jl), "added 4")
	assert.Contains(t, memCLI(t, "memory", "import", "--db", db2, jl), "4 duplicates skipped")
	// The copy exports to the same bytes: namespaces, contents, scores,
	// steps, episodes, times, embedder and vectors all survived.
	assert.Equal(t, string(raw), memCLI(t, "memory", "export", "--db", db2))
	a := memCLI(t, "memory", "search", "--db", db, "-n", "boil/3", "--query", "kitchen stove", "--json", "--threshold", "-1")
	b := memCLI(t, "memory", "search", "--db", db2, "-n", "boil/3", "--query", "kitchen stove", "--json", "--threshold", "-1")
	assert.JSONEq(t, a, b)
	stdout := memCLI(t, "memory", "export", "--db", db, "-n", "melt/0")
	assert.Equal(t, 1, strings.Count(stdout, "\n"))

	// Prune and reset.
	assert.Contains(t, memCLI(t, "memory", "prune", "--db", db2, "--below-score", "0"), "removed 1")
	assert.Contains(t, memCLI(t, "memory", "prune", "--db", db2, "-n", "boil/3", "--keep", "1"), "removed 1")
	assert.Contains(t, memCLI(t, "memory", "reset", "--db", db2, "-n", "melt/0"), "removed 1")
	assert.Contains(t, memCLI(t, "memory", "reset", "--db", db2, "--all"), "removed 1")
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "stats", "--db", db2, "--json")), &st))
	assert.Equal(t, 0, st.Entries)

	// Errors: clear messages, no panics, no file created by read commands.
	memCLIFail(t, "no such memory database", "memory", "stats", "--db", filepath.Join(dir, "missing.db"))
	_, err = os.Stat(filepath.Join(dir, "missing.db"))
	assert.True(t, os.IsNotExist(err))
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("just some text, not a database\n"), 0o644))
	memCLIFail(t, "not an empo2 memory database", "memory", "list", "--db", notes)
	memCLIFail(t, "exactly one of", "memory", "reset", "--db", db)
	memCLIFail(t, "--keep, --before or --below-score", "memory", "prune", "--db", db)
	memCLIFail(t, "--before", "memory", "prune", "--db", db, "--before", "last week")
	memCLIFail(t, "namespace", "memory", "search", "--db", db, "--query", "x")
	memCLI(t, "memory", "add", "--db", filepath.Join(dir, "d.db"), "-n", "x", "--content", "c", "--dim", "16")
	memCLIFail(t, "embedder differs", "memory", "add", "--db", filepath.Join(dir, "d.db"), "-n", "x", "--content", "c", "--dim", "32")
	memCLIFail(t, "hash-ngram-v1/16", "memory", "add", "--db", filepath.Join(dir, "d.db"), "-n", "x", "--content", "c", "--embed-model", writeMemModel(t, dir))
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"namespace\":\"x\",\"content\":\"c\",\"bogus\":1}\n"), 0o644))
	memCLIFail(t, "line 1", "memory", "import", "--db", db, bad)
}

// writeMemModel writes a tiny random-weight Qwen2 GGUF to use as an
// embedding model.
func writeMemModel(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "embed.gguf")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	require.NoError(t, modelgen.Write(p, modelgen.DefaultConfig()))
	return p
}

func TestMemoryCLIEmbedModel(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "mem.db")
	model := writeMemModel(t, dir)
	memCLI(t, "memory", "add", "--db", db, "-n", "a", "--content", "heat the water on the stove", "--embed-model", model)
	memCLI(t, "memory", "add", "--db", db, "-n", "a", "--content", "open the door to the hallway", "--embed-model", model)
	var st memstore.Stats
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "stats", "--db", db, "--json")), &st))
	assert.True(t, strings.HasPrefix(st.Embedder, "llama:"), st.Embedder)
	var sr struct {
		Count   int              `json:"count"`
		Entries []memstore.Match `json:"entries"`
	}
	out := memCLI(t, "memory", "search", "--db", db, "-n", "a", "--query", "heat the water on the stove", "--embed-model", model, "--json", "--by-similarity", "--threshold", "-1")
	require.NoError(t, json.Unmarshal([]byte(out), &sr))
	require.Len(t, sr.Entries, 2)
	assert.Equal(t, "heat the water on the stove", sr.Entries[0].Content)
	assert.InDelta(t, 1, sr.Entries[0].Similarity, 1e-4, "a text retrieves its own key")
	memCLIFail(t, "--embed-model", "memory", "search", "--db", db, "-n", "a", "--query", "x")
	memCLIFail(t, "embed-model", "memory", "add", "--db", db, "-n", "a", "--content", "x", "--embed-model", filepath.Join(dir, "missing.gguf"))
}

func TestMemoryCLIImportStdin(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "mem.db")
	cmd := exec.Command(binPath, "memory", "import", "--db", db, "--dim", "32", "--json", "-")
	cmd.Stdin = strings.NewReader(`{"namespace":"boil/0","content":"a hand-written tip","score":5}` + "\n" +
		`{"namespace":"boil/0","content":"a hand-written tip","score":6}` + "\n" +
		`{"namespace":"melt/1","content":"another tip","score":1,"step":3}` + "\n")
	out, err := cmd.Output()
	require.NoError(t, err)
	var ist memstore.ImportStats
	require.NoError(t, json.Unmarshal(out, &ist))
	assert.Equal(t, memstore.ImportStats{Read: 3, Added: 2}, ist)
	var st memstore.Stats
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "stats", "--db", db, "--json")), &st))
	assert.Equal(t, "hash-ngram-v1/32", st.Embedder)
	assert.Equal(t, 2, st.Entries)
	// --threshold 0 means "> 0", not the default 0.5.
	var sr struct {
		Count int `json:"count"`
	}
	// ("written" has cosine 0.496 with the tip under hash-ngram-v1/32.)
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "search", "--db", db, "-n", "boil/0", "--query", "written", "--json")), &sr))
	assert.Equal(t, 0, sr.Count)
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "search", "--db", db, "-n", "boil/0", "--query", "written", "--threshold", "0", "--json")), &sr))
	assert.Equal(t, 1, sr.Count)
}

func TestMemoryCLICap(t *testing.T) {
	db := filepath.Join(t.TempDir(), "mem.db")
	for i, c := range []string{"one", "two", "three"} {
		args := []string{"memory", "add", "--db", db, "-n", "x", "--content", c}
		if i == 0 {
			args = append(args, "--cap", "2")
		}
		memCLI(t, args...)
	}
	var st memstore.Stats
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "stats", "--db", db, "--json")), &st))
	assert.Equal(t, 2, st.Cap, "the cap is recorded in the database")
	assert.Equal(t, 2, st.Entries)
	assert.Contains(t, memCLI(t, "memory", "stats", "--db", db), "2 per namespace")
	var list []memstore.Entry
	require.NoError(t, json.Unmarshal([]byte(memCLI(t, "memory", "list", "--db", db, "--json")), &list))
	require.Len(t, list, 2)
	assert.Equal(t, "three", list[0].Content)
	assert.Equal(t, "two", list[1].Content)
}
