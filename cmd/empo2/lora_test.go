package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
)

// tinyModel writes a modelgen Qwen2 model (default config changed by edit)
// into dir and returns its path.
func loraTinyModel(t *testing.T, dir, name string, edit func(*modelgen.Config)) string {
	t.Helper()
	cfg := modelgen.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	p := filepath.Join(dir, name)
	if err := modelgen.Write(p, cfg); err != nil {
		t.Fatalf("modelgen: %v", err)
	}
	return p
}

// wantFail runs the CLI, expecting a non-zero exit whose stderr contains
// every one of the substrings (case-insensitive).
func loraWantFail(t *testing.T, subs []string, args ...string) {
	t.Helper()
	_, stderr, err := runCLI(t, args...)
	if err == nil {
		t.Errorf("empo2 %s succeeded, want an error", strings.Join(args, " "))
		return
	}
	for _, s := range subs {
		if !strings.Contains(strings.ToLower(stderr), strings.ToLower(s)) {
			t.Errorf("empo2 %s: stderr %q lacks %q", strings.Join(args, " "), stderr, s)
		}
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine") {
		t.Errorf("empo2 %s panicked: %s", strings.Join(args, " "), stderr)
	}
}

func TestLoraInitCLI(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "base.gguf", nil)
	out := filepath.Join(dir, "a.gguf")
	if _, stderr, err := runCLI(t, "lora", "init", "--model", model, "--rank", "4", "--alpha", "8",
		"--out", out, "--seed", "3", "--targets", "q,v,down"); err != nil {
		t.Fatalf("lora init: %v\n%s", err, stderr)
	}
	a, err := lora.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	// 2 layers × 3 targets.
	if len(a.Pairs) != 6 || a.Rank() != 4 || a.Alpha != 8 || a.Arch != "qwen2" {
		t.Fatalf("adapter: %d pairs, rank %d, alpha %v, arch %s", len(a.Pairs), a.Rank(), a.Alpha, a.Arch)
	}
	for _, p := range a.Pairs {
		for _, x := range p.B {
			if x != 0 {
				t.Fatalf("%s: B is not zero without --random-b", p.Base)
			}
		}
	}
	stdout, stderr, err := runCLI(t, "lora", "validate", "--model", model, "--lora", out)
	if err != nil || !strings.Contains(stdout, "ok: 6 LoRA pairs, rank 4") {
		t.Fatalf("lora validate: %v %q %q", err, stdout, stderr)
	}
	// Same seed → same file, byte for byte.
	out2 := filepath.Join(dir, "a2.gguf")
	if _, stderr, err := runCLI(t, "lora", "init", "--model", model, "--rank", "4", "--alpha", "8",
		"--out", out2, "--seed", "3", "--targets", "q,v,down"); err != nil {
		t.Fatalf("lora init: %v\n%s", err, stderr)
	}
	b1, _ := os.ReadFile(out)
	b2, _ := os.ReadFile(out2)
	if string(b1) != string(b2) {
		t.Error("lora init with the same seed wrote different files")
	}
	// llama.cpp loads it, and with B = 0 the model is unchanged.
	lb, tb, _ := loraLlamaRun(t, model, "", "Hello there")
	la, ta, _ := loraLlamaRun(t, model, out, "Hello there")
	if d := loraMaxAbsDiff(lb, la); d > 1e-5 || ta != tb {
		t.Errorf("a fresh adapter changed llama.cpp's output: logits by %g, text %q vs %q", d, ta, tb)
	}
}

func TestLoraInitCLIErrors(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "base.gguf", nil)
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("GGUF but not really, just some bytes"), 0o644)
	out := filepath.Join(dir, "a.gguf")
	loraWantFail(t, []string{"no such file"}, "lora", "init", "--model", filepath.Join(dir, "missing.gguf"), "--out", out)
	loraWantFail(t, []string{"gguf"}, "lora", "init", "--model", junk, "--out", out)
	loraWantFail(t, []string{"rank"}, "lora", "init", "--model", model, "--rank", "0", "--out", out)
	loraWantFail(t, []string{"unknown target", "lm_head"}, "lora", "init", "--model", model, "--targets", "q,lm_head", "--out", out)
	loraWantFail(t, []string{"--dtype"}, "lora", "init", "--model", model, "--type", "q4_0", "--out", out)
	loraWantFail(t, []string{"out"}, "lora", "init", "--model", model)
	loraWantFail(t, []string{"--targets is empty"}, "lora", "init", "--model", model, "--targets", " ", "--out", out)
	loraWantFail(t, []string{"alpha"}, "lora", "init", "--model", model, "--alpha", "NaN", "--out", out)
	loraWantFail(t, []string{"alpha"}, "lora", "init", "--model", model, "--alpha", "1e39", "--out", out)
	loraWantFail(t, []string{"alpha"}, "lora", "init", "--model", model, "--alpha", "-1", "--out", out)
	loraWantFail(t, []string{"rank"}, "lora", "init", "--model", model, "--rank", "100000000", "--out", out)
	loraWantFail(t, []string{"rank 65 exceeds"}, "lora", "init", "--model", model, "--rank", "65", "--out", out)
	// the output must not be the base model, however it is spelt
	before, _ := os.ReadFile(model)
	loraWantFail(t, []string{"overwrite"}, "lora", "init", "--model", model, "--out", dir+"/./base.gguf")
	if after, _ := os.ReadFile(model); string(after) != string(before) {
		t.Fatal("lora init overwrote its base model")
	}
	// another architecture (a llama-arch file with a q projection) is refused by name
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "llama")
	w.AddKV("general.type", "model")
	if err := w.AddTensorF32("blk.0.attn_q.weight", []uint64{8, 8}, make([]float32, 64)); err != nil {
		t.Fatal(err)
	}
	llamaArch := filepath.Join(dir, "llama-arch.gguf")
	if err := w.WriteFile(llamaArch); err != nil {
		t.Fatal(err)
	}
	loraWantFail(t, []string{"architecture", "llama", "qwen2"}, "lora", "init", "--model", llamaArch, "--targets", "q", "--out", out)
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed init left %s behind", out)
	}
	// An adapter is not a base model.
	if _, stderr, err := runCLI(t, "lora", "init", "--model", model, "--out", out); err != nil {
		t.Fatal(err, stderr)
	}
	loraWantFail(t, []string{"adapter"}, "lora", "init", "--model", out, "--out", filepath.Join(dir, "b.gguf"))
	// validate: a model as the adapter, and an adapter for another base.
	loraWantFail(t, []string{"not a lora adapter"}, "lora", "validate", "--model", model, "--lora", model)
	other := loraTinyModel(t, dir, "wide.gguf", func(c *modelgen.Config) { c.Hidden = 96; c.Heads = 6; c.KVHeads = 2 })
	loraWantFail(t, []string{"does not match", "shape"}, "lora", "validate", "--model", other, "--lora", out)
}
