package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/modelgen"
)

// llmTestModel writes a modelgen default (tiny Qwen2) model into a temp dir.
func llmTestModel(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := modelgen.Write(p, modelgen.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	return p
}

// jsonSafe replaces each invalid UTF-8 byte by U+FFFD, as encoding/json
// does (random models emit arbitrary bytes).
func jsonSafe(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

type genJSON struct {
	PromptTokens int `json:"prompt_tokens"`
	Sequences    []struct {
		Text     string    `json:"text"`
		Finish   string    `json:"finish"`
		Tokens   []int32   `json:"tokens"`
		LogProbs []float32 `json:"logprobs"`
	} `json:"sequences"`
}

func genRun(t *testing.T, args ...string) genJSON {
	t.Helper()
	out, stderr, err := runCLI(t, append([]string{"generate", "--json", "--threads", "1"}, args...)...)
	if err != nil {
		t.Fatalf("generate %v: %v\n%s", args, err, stderr)
	}
	var g genJSON
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("generate JSON: %v\n%s", err, out)
	}
	return g
}

func TestGenerateCLI(t *testing.T) {
	model := llmTestModel(t)
	args := []string{"--model", model, "--prompt", "Once upon a time", "--max-tokens", "12", "--temperature", "1", "--seed", "3", "--ignore-eog"}
	a := genRun(t, args...)
	b := genRun(t, args...)
	if len(a.Sequences) != 1 || len(a.Sequences[0].Tokens) != 12 || a.Sequences[0].Finish != "length" {
		t.Fatalf("unexpected output %+v", a)
	}
	if a.Sequences[0].Text != b.Sequences[0].Text {
		t.Fatalf("same seed gave %q and %q", a.Sequences[0].Text, b.Sequences[0].Text)
	}
	// plain output is the text
	out, stderr, err := runCLI(t, append([]string{"generate", "--threads", "1"}, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if jsonSafe(out) != a.Sequences[0].Text+"\n" {
		t.Fatalf("plain output %q, JSON text %q", out, a.Sequences[0].Text)
	}
	// --n 3 samples 3 sequences in one batch; sequence 0 equals the n=1 run
	n3 := genRun(t, append(args, "--sequences", "3")...)
	if len(n3.Sequences) != 3 || n3.Sequences[0].Text != a.Sequences[0].Text {
		t.Fatalf("--n 3: %+v", n3)
	}
	if n3.Sequences[1].Text == n3.Sequences[0].Text && n3.Sequences[2].Text == n3.Sequences[0].Text {
		t.Fatal("--n 3 sequences identical")
	}
	// chat template wraps the prompt
	chat := genRun(t, "--model", model, "--prompt", "Hi", "--chat", "--max-tokens", "4", "--temperature", "0")
	if chat.PromptTokens <= a.PromptTokens-2 || len(chat.Sequences[0].Tokens) == 0 {
		t.Fatalf("--chat prompt has %d tokens", chat.PromptTokens)
	}
}

func TestGenerateCLILora(t *testing.T) {
	model := llmTestModel(t)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("output.weight")
	f.Close()
	nIn, nOut, r := int(ti.Shape[0]), int(ti.Shape[1]), 2
	a := make([]float32, nIn*r)
	b := make([]float32, r*nOut)
	for i := range a {
		a[i] = float32(math.Sin(float64(i))) * 0.5
	}
	for i := range b {
		b[i] = float32(math.Cos(float64(i))) * 0.5
	}
	w := gguf.NewWriter()
	w.AddKV("general.type", "adapter")
	w.AddKV("general.architecture", "qwen2")
	w.AddKV("adapter.type", "lora")
	w.AddKV("adapter.lora.alpha", float32(2))
	if err := w.AddTensorF32("output.weight.lora_a", []uint64{uint64(nIn), uint64(r)}, a); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensorF32("output.weight.lora_b", []uint64{uint64(r), uint64(nOut)}, b); err != nil {
		t.Fatal(err)
	}
	ad := filepath.Join(t.TempDir(), "a.gguf")
	if err := w.WriteFile(ad); err != nil {
		t.Fatal(err)
	}
	args := []string{"--model", model, "--prompt", "Once upon a time", "--max-tokens", "6", "--temperature", "0", "--ignore-eog"}
	base := genRun(t, args...)
	with := genRun(t, append(args, "--lora", ad)...)
	zero := genRun(t, append(args, "--lora", ad, "--lora-scale", "0")...)
	if with.Sequences[0].LogProbs[0] == base.Sequences[0].LogProbs[0] {
		t.Fatal("--lora did not change the model")
	}
	if zero.Sequences[0].Text != base.Sequences[0].Text || math.Abs(float64(zero.Sequences[0].LogProbs[0]-base.Sequences[0].LogProbs[0])) > 1e-5 {
		t.Fatal("--lora-scale 0 differs from the base model")
	}
}

func TestGenerateCLIErrors(t *testing.T) {
	model := llmTestModel(t)
	bertModel := filepath.Join(t.TempDir(), "bert.gguf") // an embedding model: no LM head
	if err := modelgen.WriteBERT(bertModel, modelgen.DefaultBERTConfig()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"generate", "--model", filepath.Join(t.TempDir(), "none.gguf"), "--prompt", "x"}, "cannot load model"},
		{[]string{"generate", "--model", model, "--prompt", strings.Repeat("word ", 700)}, "prompt too long"},
		{[]string{"generate", "--model", model, "--prompt", "x", "--sequences", "0"}, "--sequences"},
		{[]string{"generate", "--model", model, "--prompt", "x", "--lora", model}, "bad adapter"},
		{[]string{"generate", "--model", model}, "prompt"},
		{[]string{"generate", "--model", model, "--prompt", "x", "--temperature", "NaN"}, "invalid argument"},
		{[]string{"generate", "--model", model, "--prompt", "x", "--top-p", "Inf"}, "invalid argument"},
		{[]string{"generate", "--model", model, "--prompt", "x", "--top-k", "-1"}, "invalid argument"},
		{[]string{"generate", "--model", model, "--prompt", "x", "--ctx", "-1"}, "invalid argument"},
		{[]string{"generate", "--model", model, "--prompt", "x", "--max-tokens", "100000"}, "--max-tokens 100000: the prompt (1 tokens) leaves room for at most"},
		{[]string{"generate", "--model", bertModel, "--prompt", "x"}, "non-causal encoder"},
		{[]string{"score", "--model", bertModel, "--prompt", "x", "--continuation", "y"}, "non-causal encoder"},
	} {
		_, stderr, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(strings.ToLower(stderr), strings.ToLower(tc.want)) {
			t.Errorf("%v: err %v, stderr %q lacks %q", tc.args[:3], err, stderr, tc.want)
		}
	}
}

// TestGenerateCLILogsAndRandomSeed: llama.cpp's loader output is hidden at
// the default log level and shown with --log-level debug; without --seed
// each run samples with a fresh seed (logged) and still prints text.
func TestGenerateCLILogsAndRandomSeed(t *testing.T) {
	model := llmTestModel(t)
	args := []string{"generate", "--threads", "1", "--model", model, "--prompt", "hi", "--max-tokens", "16", "--temperature", "1", "--ignore-eog"}
	out1, stderr1, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr1)
	}
	out2, _, err := runCLI(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out1) == "" || out1 == out2 {
		t.Fatalf("two unseeded runs printed %q and %q", out1, out2)
	}
	if !strings.Contains(stderr1, "random seed") || strings.Contains(stderr1, "llama_model_loader") {
		t.Fatalf("default-level stderr:\n%s", stderr1)
	}
	_, stderr, err := runCLI(t, append([]string{"--log-level", "debug"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "llama_model_loader") || !strings.Contains(stderr, "llama.cpp") {
		t.Fatalf("--log-level debug does not show llama.cpp's loader:\n%.2000s", stderr)
	}
}
