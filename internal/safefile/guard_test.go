package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckOutputs: every spelling of an input as an output is refused
// (relative, "./", through a symlinked folder, a symlink, a hard link), as
// are two outputs of one file, a directory where a file is wanted, a file
// where a folder is wanted, a file a folder output writes that is an input,
// and an output in a missing folder; distinct files, skipped empty paths
// and devices pass. Each refusal names both flags.
func TestCheckOutputs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	mustWrite(t, "model.gguf", "model")
	mustWrite(t, "data.jsonl", "data")
	if err := os.Symlink("model.gguf", "link.gguf"); err != nil {
		t.Fatal(err)
	}
	if err := os.Link("data.jsonl", "hard.jsonl"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, "d"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("new.txt", "dangling"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("peft", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, "peft/adapter_config.json", "{}")
	mustWrite(t, "peft/w.bin", "w")
	abs := func(p string) string { return filepath.Join(dir, p) }
	in := []Path{{Flag: "-m", Path: "model.gguf"}, {Flag: "--data", Path: abs("data.jsonl")}, {Flag: "--init", Path: ""}}
	type out = []Path
	cases := []struct {
		name  string
		outs  []Path
		ins   []Path
		want  error
		names []string // in the message
	}{
		{"distinct", out{{Flag: "-o", Path: "adapter.gguf"}, {Flag: "--text", Path: "corpus.txt"}}, in, nil, nil},
		{"same spelling", out{{Flag: "-o", Path: "model.gguf"}}, in, ErrOutputIsInput, []string{"-o model.gguf", "-m model.gguf", "overwrite"}},
		{"absolute vs relative", out{{Flag: "-o", Path: abs("model.gguf")}}, in, ErrOutputIsInput, []string{"-m"}},
		{"dot segments", out{{Flag: "-o", Path: "./peft/../model.gguf"}}, in, ErrOutputIsInput, []string{"-m"}},
		{"symlinked folder", out{{Flag: "-o", Path: "d/data.jsonl"}}, in, ErrOutputIsInput, []string{"--data"}},
		{"symlink", out{{Flag: "-o", Path: "link.gguf"}}, in, ErrOutputIsInput, []string{"-o link.gguf", "-m model.gguf"}},
		{"hard link", out{{Flag: "--checkpoint", Path: "hard.jsonl"}}, in, ErrOutputIsInput, []string{"--checkpoint hard.jsonl", "--data"}},
		{"two outputs", out{{Flag: "-o", Path: "x.jsonl"}, {Flag: "--text", Path: "d/x.jsonl"}}, in, ErrOutputsCollide, []string{"-o x.jsonl", "--text d/x.jsonl"}},
		{"two outputs, one a dangling link", out{{Flag: "-o", Path: "dangling"}, {Flag: "--text", Path: "new.txt"}}, in, ErrOutputsCollide, []string{"-o", "--text"}},
		{"two existing outputs", out{{Flag: "-o", Path: "data.jsonl"}, {Flag: "--text", Path: "hard.jsonl"}}, nil, ErrOutputsCollide, []string{"-o", "--text"}},
		{"dot", out{{Flag: "-o", Path: "."}}, in, ErrNotFile, []string{"-o . is a directory"}},
		{"folder", out{{Flag: "-o", Path: "peft"}}, in, ErrNotFile, []string{"-o peft is a directory"}},
		{"trailing slash", out{{Flag: "-o", Path: "new/"}}, in, ErrNotFile, []string{"-o new/"}},
		{"missing folder", out{{Flag: "-o", Path: "nope/x.json"}}, in, fs.ErrNotExist, []string{"-o nope/x.json", "folder nope does not exist"}},
		{"folder output is a file", out{{Flag: "--out", Path: "model.gguf", Dir: true}}, in, ErrNotDir, []string{"--out model.gguf"}},
		{"folder output is an input folder", out{{Flag: "--out", Path: "d/peft", Dir: true}}, []Path{{Flag: "RUN_DIR", Path: "peft", Dir: true}},
			ErrOutputIsInput, []string{"--out d/peft", "RUN_DIR peft"}},
		{"file of a folder output", out{{Flag: "--out", Path: ".", Dir: true, Files: []string{"model.gguf"}}}, in, ErrOutputIsInput, []string{"--out model.gguf", "-m"}},
		{"file of an input folder", out{{Flag: "-o", Path: "peft/adapter_config.json"}}, []Path{{Flag: "PEFT_DIR", Path: "peft", Dir: true, Files: []string{"adapter_config.json"}}},
			ErrOutputIsInput, []string{"PEFT_DIR peft/adapter_config.json"}},
		{"input folder given as its file", out{{Flag: "-o", Path: "peft/adapter_config.json"}}, []Path{{Flag: "PEFT_DIR", Path: "peft/adapter_config.json", Dir: true, Files: []string{"x"}}},
			ErrOutputIsInput, []string{"PEFT_DIR"}},
		{"file beside an input folder's file", out{{Flag: "-o", Path: "d/peft/adapter_config.json"}}, []Path{{Flag: "PEFT_DIR", Path: "peft/w.bin", Dir: true, Files: []string{"adapter_config.json", "w.bin"}}},
			ErrOutputIsInput, []string{"-o d/peft/adapter_config.json", "PEFT_DIR peft/adapter_config.json"}},
		{"new folder output", out{{Flag: "--out", Path: "a/b/c", Dir: true, Files: []string{"x"}}}, in, nil, nil},
		{"devices", out{{Flag: "-o", Path: os.DevNull}, {Flag: "--text", Path: os.DevNull}}, []Path{{Flag: "-m", Path: os.DevNull}}, nil, nil},
	}
	for _, c := range cases {
		err := CheckOutputs(c.outs, c.ins)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var oe *OutputError
		if !errors.Is(err, c.want) || !errors.As(err, &oe) {
			t.Errorf("%s: %v, want an OutputError wrapping %v", c.name, err, c.want)
			continue
		}
		for _, n := range c.names {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("%s: %q lacks %q", c.name, err, n)
			}
		}
	}
	if names := entries(t, dir); strings.Join(names, ",") != "d,dangling,data.jsonl,hard.jsonl,link.gguf,model.gguf,peft" {
		t.Errorf("the guard created or removed files: %v", names)
	}
}

// TestSameFile: the guard's notion of one file, for callers that compare
// two paths.
func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.db")
	mustWrite(t, a, "x")
	if err := os.Symlink(dir, filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{a, filepath.Join(dir, "d", "a.db"), true},
		{a + "-wal", filepath.Join(dir, "d", "a.db-wal"), true}, // neither exists
		{a, a + "-wal", false},
		{a, filepath.Join(dir, "b.db"), false},
	} {
		if got := SameFile(c.a, c.b); got != c.want {
			t.Errorf("SameFile(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// TestCheckOutputsRunDirectory (issue 38 §1): an output anywhere inside a
// training run directory (a folder holding RunMarker) is refused, however
// spelt, naming the run; the run's layout (RunLayout) lets a command's own
// kind of result in; outside the run nothing changes.
func TestCheckOutputsRunDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll("r/checkpoints/step-000003", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, "r/"+RunMarker, "{}")
	mustWrite(t, "r/config.yaml", "seed: 1\n")
	mustWrite(t, "r/checkpoints/step-000003/adapter.gguf", "a")
	if err := os.Symlink("r", "link"); err != nil {
		t.Fatal(err)
	}
	for _, out := range []Path{
		{Flag: "out", Path: "r/checkpoints/step-000003/adapter.gguf"},
		{Flag: "out", Path: "r/config.yaml"},
		{Flag: "out", Path: "r/metrics.jsonl"},
		{Flag: "out", Path: "link/new.json"},
		{Flag: "out", Path: "./r/../r/checkpoints/x.json"},
		{Flag: "out", Path: "r/eval/x.txt", RunLayout: []string{"eval/*.json"}},
		{Flag: "--out", Path: "r/report", Dir: true, Files: []string{"report.html"}},
	} {
		err := CheckOutputs([]Path{out}, nil)
		if !errors.Is(err, ErrOutputInRun) || !strings.Contains(err.Error(), out.Path) || !strings.Contains(err.Error(), filepath.Join(dir, "r")) ||
			!strings.Contains(err.Error(), "write it outside the run") {
			t.Errorf("%s: %v", out.Path, err)
		}
	}
	if err := os.MkdirAll("r/eval", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, out := range []Path{
		{Flag: "out", Path: "r/eval/eval-test-off-step-000003.json", RunLayout: []string{"eval/*.json"}},
		{Flag: "out", Path: "elsewhere.json"},
		{Flag: "out", Path: "r2.json"},
	} {
		if err := CheckOutputs([]Path{out}, nil); err != nil {
			t.Errorf("%s: %v", out.Path, err)
		}
	}
}

// TestCheckNew (issue 38 §2): an existing output is refused without force,
// naming the file and the flag that replaces it; a folder output's files
// count, the folder itself does not; devices and missing files pass.
func TestCheckNew(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	mustWrite(t, "a.gguf", "x")
	if err := os.MkdirAll("peft", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, "peft/adapter_config.json", "{}")
	peft := Path{Flag: "--out", Path: "peft", Dir: true, Files: []string{"adapter_model.safetensors", "adapter_config.json"}}
	for _, out := range []Path{{Flag: "-o", Path: "a.gguf"}, peft} {
		err := CheckNew([]Path{out}, false)
		if !errors.Is(err, ErrOutputExists) || !strings.Contains(err.Error(), ForceFlag) || !strings.Contains(err.Error(), out.Flag) {
			t.Errorf("%s: %v", out.Path, err)
		}
		if err := CheckNew([]Path{out}, true); err != nil {
			t.Errorf("%s with force: %v", out.Path, err)
		}
	}
	if err := CheckNew([]Path{peft}, false); !strings.Contains(err.Error(), filepath.Join("peft", "adapter_config.json")) {
		t.Errorf("the file is not named: %v", err)
	}
	for _, out := range []Path{{Flag: "-o", Path: "new.gguf"}, {Flag: "-o", Path: "/dev/null"}, {Flag: "-o", Path: ""},
		{Flag: "--out", Path: "peft", Dir: true, Files: []string{"other.json"}}} {
		if err := CheckNew([]Path{out}, false); err != nil {
			t.Errorf("%s: %v", out.Path, err)
		}
	}
}
