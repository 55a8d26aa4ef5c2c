package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
)

// TestSplitModelCommands: a model written as 3 split files in gguf-split's
// layout (name-00001-of-00003.gguf …), given by its first file, works in
// every command that reads a base: generate and eval print what the
// unsplit file gives, train runs a step, export --merged (the base read by
// the Go GGUF reader) writes the very bytes the unsplit base gives, and
// model quantize gives the same file.
func TestSplitModelCommands(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "tiny.gguf", nil)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := gguf.WriteSplits(f, filepath.Join(dir, "tiny-split"), 3)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	first := paths[0]
	out := func(args ...string) string {
		t.Helper()
		stdout, stderr, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("empo2 %v: %v\n%s", args, err, stderr)
		}
		return stdout
	}
	for _, args := range [][]string{
		{"generate", "--prompt", "go to the kitchen", "--max-tokens", "8", "--seed", "1", "--threads", "1"},
		{"eval", "--tasks", "melt", "--variations", "1", "--step-limit", "3", "--memory", "off", "--threads", "1", "--json"},
	} {
		a := out(append([]string{args[0], "--model", first}, args[1:]...)...)
		b := out(append([]string{args[0], "--model", model}, args[1:]...)...)
		if a != b || a == "" {
			t.Fatalf("%s: split model printed\n%s\nunsplit\n%s", args[0], a, b)
		}
	}
	loraMustCLI(t, "train", "--preset", "grpo", "-m", first, "--env", "textlab", "--tasks", "melt", "--run-dir", filepath.Join(dir, "run"),
		"--steps", "1", "--threads", "1", "--set", "batch.rollouts=2")

	adapter := filepath.Join(dir, "a.gguf")
	loraMustCLI(t, "lora", "init", "--model", model, "--rank", "4", "--alpha", "8", "--seed", "3", "--random-b", "--out", adapter)
	same := func(what string, mk func(base, out string)) {
		t.Helper()
		a, b := filepath.Join(dir, what+"-split.gguf"), filepath.Join(dir, what+".gguf")
		mk(first, a)
		mk(model, b)
		ba, _ := os.ReadFile(a)
		bb, _ := os.ReadFile(b)
		if len(ba) == 0 || !bytes.Equal(ba, bb) {
			t.Fatalf("%s from the split model: %d bytes, from the unsplit one %d, not the same bytes", what, len(ba), len(bb))
		}
	}
	same("merged", func(base, o string) {
		loraMustCLI(t, "export", "--model", base, "--lora", adapter, "--merged", "--out", o)
	})
	same("q8_0", func(base, o string) {
		loraMustCLI(t, "model", "quantize", base, o, "--dtype", "q8_0", "--threads", "1")
	})
	loraWantFail(t, []string{"split"}, "generate", "--model", paths[1], "--prompt", "hi", "--max-tokens", "2")
}

// TestModelQuantizeRefusesInputs: OUT naming IN, or one of IN's splits, is
// refused before anything is written; a failed quantization leaves no file.
func TestModelQuantizeRefusesInputs(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "tiny.gguf", nil)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := gguf.WriteSplits(f, filepath.Join(dir, "s"), 3)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(paths[2])
	loraWantFail(t, []string{"overwrite"}, "model", "quantize", model, model, "--dtype", "q8_0")
	loraWantFail(t, []string{"overwrite"}, "model", "quantize", paths[0], paths[2], "--dtype", "q8_0")
	if after, _ := os.ReadFile(paths[2]); !bytes.Equal(before, after) {
		t.Fatal("a split was overwritten")
	}
	out := filepath.Join(dir, "x.gguf")
	loraMustCLI(t, "model", "quantize", model, filepath.Join(dir, "tiny-q8.gguf"), "--dtype", "q8_0")
	// requantizing without --allow-requantize: llama.cpp refuses
	loraWantFail(t, []string{"requantizing"}, "model", "quantize", filepath.Join(dir, "tiny-q8.gguf"), out, "--dtype", "q4_0")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() == "x.gguf" || strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("a failed quantization left %s", e.Name())
		}
	}
}
