package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The output guard through the binary: no command writes over one of its
// inputs, or one output over another, however the path is spelled; a file
// output that names a directory is refused up front with a clear message
// and leaves nothing behind.

// snapshot is every file under dir with its content (folders end in /).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.IsDir():
			m[rel+"/"] = ""
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "-> " + l
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = string(b)
		}
		return nil
	}))
	return m
}

func names(m map[string]string) []string {
	var n []string
	for k := range m {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// wantRefused runs the binary in dir and wants a non-zero exit whose stderr
// holds every sub, and dir exactly as before.
func wantRefused(t *testing.T, dir string, subs []string, args ...string) {
	t.Helper()
	before := snapshot(t, dir)
	_, stderr, err := runCLIIn(t, dir, args...)
	require.Error(t, err, "empo2 %s succeeded", strings.Join(args, " "))
	for _, s := range subs {
		assert.Contains(t, stderr, s, "empo2 %s", strings.Join(args, " "))
	}
	assert.NotContains(t, stderr, "panic")
	after := snapshot(t, dir)
	assert.Equal(t, names(before), names(after), "empo2 %s changed the files of its folder", strings.Join(args, " "))
	for k, v := range before {
		if after[k] != v {
			t.Errorf("empo2 %s changed %s", strings.Join(args, " "), k)
		}
	}
}

var demosFast = []string{"env", "demos", "textlab", "--tasks", "melt", "--split", "train", "--variations", "1", "--kind", "explore", "--simplifications", "easy"}

// TestEnvDemosOutputs: `env demos -o X --text X` used to replace the JSONL
// with the text corpus; every spelling of one file for both outputs is
// refused, naming both keys (out, text: demos.Run's configuration), and X
// stays byte-identical. Different files are both written.
func TestEnvDemosOutputs(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "X"), []byte(`{"messages":[]}`+"\n"), 0o644))
	require.NoError(t, os.Link(filepath.Join(dir, "X"), filepath.Join(dir, "hard")))
	require.NoError(t, os.Symlink("X", filepath.Join(dir, "link")))
	for _, text := range []string{"X", "./X", filepath.Join(dir, "X"), "hard", "link"} {
		wantRefused(t, dir, []string{"out X", "text " + text, "same file"}, append(demosFast, "-o", "X", "--text", text)...)
	}
	wantRefused(t, dir, []string{"out .", "must name a file"}, append(demosFast, "-o", ".")...)
	wantRefused(t, dir, []string{"text sub/t.txt", "does not exist"}, append(demosFast, "-o", "d.jsonl", "--text", "sub/t.txt")...)

	_, stderr, err := runCLIIn(t, dir, append(demosFast, "-o", "d.jsonl", "--text", "t.txt")...)
	require.NoError(t, err, stderr)
	d, err := os.ReadFile(filepath.Join(dir, "d.jsonl"))
	require.NoError(t, err)
	txt, err := os.ReadFile(filepath.Join(dir, "t.txt"))
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(d, []byte(`{"messages":`)), "d.jsonl: %.40s", d)
	assert.NotEmpty(t, txt)
	assert.False(t, bytes.Contains(txt, []byte(`{"messages":`)), "t.txt holds JSONL")
	assert.Equal(t, []string{"./", "X", "d.jsonl", "hard", "link", "t.txt"}, names(snapshot(t, dir)), "temporary files left")
}

// TestEvalOutMustBeFile: `eval -o .` used to run the whole evaluation, then
// fail with "rename ..tmp .: file exists" and leave a stray "..tmp". Now -o
// is checked before anything runs: a directory, a missing folder and an
// input are refused; a file gets the JSON result.
func TestEvalOutMustBeFile(t *testing.T) {
	model := llmTestModel(t)
	dir := t.TempDir()
	eval := append([]string{"eval", "--model", model, "--tasks", "melt"}, evalFast...)
	wantRefused(t, dir, []string{"out . is a directory", "must name a file"}, append(eval, "-o", ".")...)
	wantRefused(t, dir, []string{"out " + dir + " is a directory"}, append(eval, "-o", dir)...)
	wantRefused(t, dir, []string{"out none/r.json", "folder none does not exist"}, append(eval, "-o", "none/r.json")...)
	wantRefused(t, filepath.Dir(model), []string{"out tiny.gguf would overwrite the input model"}, append(eval, "-o", "tiny.gguf")...)

	_, stderr, err := runCLIIn(t, dir, append(eval, "-o", "r.json")...)
	require.NoError(t, err, stderr)
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	require.NoError(t, err)
	var res map[string]any
	require.NoError(t, json.Unmarshal(b, &res), "%s", b)
	assert.Equal(t, []string{"./", "r.json"}, names(snapshot(t, dir)))
}

// TestExportRefusesItsInputs: export in every format refuses an --out that
// is the model or the adapter (by any spelling: symlink, hard link) and
// leaves both byte-identical; `-o .` says -o must name a file instead of
// failing at the rename.
func TestExportRefusesItsInputs(t *testing.T) {
	dir := t.TempDir()
	loraTinyModel(t, dir, "base.gguf", nil)
	_, stderr, err := runCLIIn(t, dir, "lora", "init", "--model", "base.gguf", "--rank", "2", "--out", "a.gguf")
	require.NoError(t, err, stderr)
	require.NoError(t, os.Link(filepath.Join(dir, "base.gguf"), filepath.Join(dir, "hard.gguf")))
	require.NoError(t, os.Symlink("a.gguf", filepath.Join(dir, "link.gguf")))
	for _, out := range []string{"base.gguf", "./base.gguf", "hard.gguf", "a.gguf", "link.gguf"} {
		for _, extra := range [][]string{nil, {"--merged"}, {"--format", "peft"}, {"--format", "hf", "--merged"}} {
			args := append([]string{"export", "--model", "base.gguf", "--lora", "a.gguf", "--out", out}, extra...)
			want := "would overwrite the input"
			if len(extra) > 0 && extra[0] == "--format" {
				want = "is not a directory" // a folder format refuses any file
			}
			wantRefused(t, dir, []string{"--out " + out, want}, args...)
		}
	}
	wantRefused(t, dir, []string{"--out . is a directory", "must name a file"}, "export", "--model", "base.gguf", "--lora", "a.gguf", "--out", ".")
}

// TestLoraImportRefusesItsFolder: `lora import --out DIR/adapter_model.safetensors
// DIR` used to replace the PEFT weights it had just read with a GGUF; the
// guard knows the files of the input folder.
func TestLoraImportRefusesItsFolder(t *testing.T) {
	dir := t.TempDir()
	loraTinyModel(t, dir, "base.gguf", nil)
	_, stderr, err := runCLIIn(t, dir, "lora", "init", "--model", "base.gguf", "--rank", "2", "--out", "a.gguf")
	require.NoError(t, err, stderr)
	_, stderr, err = runCLIIn(t, dir, "export", "--model", "base.gguf", "--lora", "a.gguf", "--format", "peft", "--out", "peft")
	require.NoError(t, err, stderr)
	wantRefused(t, dir, []string{"--out peft/adapter_model.safetensors would overwrite the input PEFT_DIR"},
		"lora", "import", "--model", "base.gguf", "--out", "peft/adapter_model.safetensors", "peft")
	wantRefused(t, dir, []string{"--out peft/adapter_config.json would overwrite"},
		"lora", "import", "--model", "base.gguf", "--out", "peft/adapter_config.json", "peft/adapter_model.safetensors")
	wantRefused(t, dir, []string{"--out peft is a directory"}, "lora", "import", "--model", "base.gguf", "--out", "peft", "peft")
	wantRefused(t, dir, []string{"--out base.gguf would overwrite the input --model"}, "lora", "import", "--model", "base.gguf", "--out", "base.gguf", "peft")
	wantRefused(t, dir, []string{"--out . is a directory"}, "lora", "init", "--model", "base.gguf", "--out", ".")
}

// TestMemoryOutputs: memory import refuses a --db that is one of the files
// it imports; memory export's --out must name a file.
func TestMemoryOutputs(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.jsonl"), []byte(`{"namespace":"a/0","content":"tip","score":1}`+"\n"), 0o644))
	wantRefused(t, dir, []string{"--db x.jsonl would overwrite the input FILE x.jsonl"}, "memory", "import", "--db", "x.jsonl", "x.jsonl")
	_, stderr, err := runCLIIn(t, dir, "memory", "import", "--db", "m.db", "x.jsonl")
	require.NoError(t, err, stderr)
	wantRefused(t, dir, []string{"--out . is a directory"}, "memory", "export", "--db", "m.db", "--out", ".")
	// x.jsonl exists (issue 38 §2): replaced only with --force
	wantRefused(t, dir, []string{"--out x.jsonl exists", "give --force to replace it"}, "memory", "export", "--db", "m.db", "--out", "x.jsonl")
	_, stderr, err = runCLIIn(t, dir, "memory", "export", "--db", "m.db", "--out", "x.jsonl", "--force")
	require.NoError(t, err, stderr)
	b, err := os.ReadFile(filepath.Join(dir, "x.jsonl"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"content":"tip"`)
}

// TestReportOutIsNotARun: report refuses to write into a run directory it
// reads, and an --out that is a file.
func TestReportOutIsNotARun(t *testing.T) {
	dir := t.TempDir()
	writeTinyRun(t, filepath.Join(dir, "r"), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644))
	wantRefused(t, dir, []string{"--out r would overwrite the input RUN r"}, "report", "r", "--out", "r")
	wantRefused(t, dir, []string{"--out ./r/"}, "report", "r", "--out", "./r/")
	wantRefused(t, dir, []string{"--out file is not a directory"}, "report", "r", "--out", "file")
}

// TestModelInitOutMustBeFile: `model init --out .` used to fail at the
// rename ("rename ./...tmp-… .: file exists"); it is refused up front.
func TestModelInitOutMustBeFile(t *testing.T) {
	dir := t.TempDir()
	wantRefused(t, dir, []string{"--out . is a directory", "must name a file"}, "model", "init", "--out", ".")
	wantRefused(t, dir, []string{"--out no/m.gguf", "does not exist"}, "model", "init", "--out", "no/m.gguf")
}
