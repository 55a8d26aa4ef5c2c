package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestModelInitAndInfo(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tiny.gguf")
	stdout, stderr, err := runCLI(t, "model", "init", "--out", out, "--seed", "3")
	if err != nil {
		t.Fatalf("model init: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "139,840 parameters") {
		t.Fatalf("init output %q lacks the parameter count", stdout)
	}
	stdout, stderr, err = runCLI(t, "model", "info", out)
	if err != nil {
		t.Fatalf("model info: %v\n%s", err, stderr)
	}
	for _, want := range []string{"architecture:   qwen2", "ALL_F32", "139,840", "layers:         2", "kv 2, head dim 16", "context:        512",
		"gpt2, pre qwen2, 512 tokens", "<|im_start|>", "ChatML"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info output lacks %q:\n%s", want, stdout)
		}
	}
	// same flags and seed → same bytes
	out2 := filepath.Join(dir, "tiny2.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", out2, "--seed", "3"); err != nil {
		t.Fatalf("second init: %v\n%s", err, stderr)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(out2)
	if !bytes.Equal(a, b) {
		t.Fatal("two inits with the same seed differ")
	}
}

func TestModelInitFlagsAndInfoJSON(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("open the chest, take the lantern. ", 40)), 0o644)
	out := filepath.Join(dir, "m.gguf")
	_, stderr, err := runCLI(t, "model", "init", "--out", out, "--layers", "1", "--hidden", "32", "--heads", "2", "--kv-heads", "1",
		"--ffn", "48", "--vocab", "300", "--ctx", "128", "--dtype", "f16", "--tied", "--corpus", corpus, "--name", "t1")
	if err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	stdout, stderr, err := runCLI(t, "model", "info", "--json", "--tensors", out)
	if err != nil {
		t.Fatalf("info --json: %v\n%s", err, stderr)
	}
	var r modelInfoReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if r.Architecture != "qwen2" || r.Name != "t1" || r.FileType != "MOSTLY_F16" || r.Hyper == nil ||
		r.Hyper.Layers != 1 || r.Hyper.Hidden != 32 || r.Hyper.Heads != 2 || r.Hyper.KVHeads != 1 || r.Hyper.FFN != 48 || r.Hyper.Context != 128 {
		t.Fatalf("report %+v hyper %+v", r, r.Hyper)
	}
	if r.Tokenizer == nil || r.Tokenizer.Tokens != 300 || r.Tokenizer.Pre != "qwen2" || r.Tokenizer.Specials["eos"] == 0 {
		t.Fatalf("tokenizer %+v", r.Tokenizer)
	}
	if !strings.Contains(r.ChatTemplate, "<|im_start|>assistant") {
		t.Fatal("JSON lacks the chat template")
	}
	if r.TensorTypes["F16"] != 1+1*7 || len(r.TensorList) != r.Tensors {
		t.Fatalf("tensor types %v, %d listed of %d", r.TensorTypes, len(r.TensorList), r.Tensors)
	}
	for _, ti := range r.TensorList {
		if ti.Name == "output.weight" {
			t.Fatal("--tied model has output.weight")
		}
	}
}

func TestModelErrors(t *testing.T) {
	dir := t.TempDir()
	notGGUF := filepath.Join(dir, "notes.txt")
	os.WriteFile(notGGUF, []byte("just some text, not a model"), 0o644)
	good := filepath.Join(dir, "good.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", good); err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	full, _ := os.ReadFile(good)
	truncated := filepath.Join(dir, "trunc.gguf")
	os.WriteFile(truncated, full[:len(full)/2], 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"model", "info", filepath.Join(dir, "missing.gguf")}, "no such file"},
		{[]string{"model", "info", notGGUF}, "not a GGUF file"},
		{[]string{"model", "info", truncated}, "truncated"},
		{[]string{"model", "info"}, "exactly one FILE"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--heads", "3"}, "must divide hidden"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--dtype", "q4"}, "dtype"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--vocab", "100"}, "vocab"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--corpus", filepath.Join(dir, "none.txt")}, "corpus"},
		{[]string{"model", "init"}, "out"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "no-such-dir", "x.gguf")}, "no such file"},
	}
	for _, c := range cases {
		_, stderr, err := runCLI(t, c.args...)
		if err == nil {
			t.Errorf("%v: exit status 0", c.args)
			continue
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, stderr, c.want)
		}
		if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine") {
			t.Errorf("%v: crashed:\n%s", c.args, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("a failed init left a file")
	}
}

func TestModelInitBERT(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bert.gguf")
	stdout, stderr, err := runCLI(t, "model", "init", "--arch", "bert", "--out", out, "--layers", "1", "--vocab", "600", "--ctx", "64")
	if err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "bert, 1 layers") {
		t.Fatalf("init output %q", stdout)
	}
	stdout, stderr, err = runCLI(t, "model", "info", out)
	if err != nil {
		t.Fatalf("info: %v\n%s", err, stderr)
	}
	for _, want := range []string{"architecture:   bert", "layers:         1", "heads:          4 (kv 4, head dim 16)", "context:        64",
		"causal:         false", "pooling:        mean", "norm eps:       1e-12", "bert, 600 tokens", "[CLS]", "chat template:  none"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info output lacks %q:\n%s", want, stdout)
		}
	}
	for _, args := range [][]string{{"--tied"}, {"--kv-heads", "1"}, {"--arch", "gpt9"}, {"--hidden", "30"}} {
		if _, stderr, err := runCLI(t, append([]string{"model", "init", "--arch", "bert", "--out", filepath.Join(dir, "x.gguf")}, args...)...); err == nil {
			t.Errorf("%v accepted", args)
		} else if !strings.Contains(stderr, "model init") {
			t.Errorf("%v: stderr %q", args, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("a refused init wrote a file")
	}
}
