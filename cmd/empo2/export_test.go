package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
)

func mustCLI(t *testing.T, args ...string) {
	t.Helper()
	if _, stderr, err := runCLI(t, args...); err != nil {
		t.Fatalf("empo2 %v: %v\n%s", args, err, stderr)
	}
}

// llamaRun loads model (plus adapter when not "") in llama.cpp and returns
// the logits after prompt and the greedy continuation of 24 tokens.
func llamaRun(t *testing.T, model, adapter string, prompt string) (logits []float32, text string, toks []int32) {
	t.Helper()
	m, err := llama.LoadModel(model, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if adapter != "" {
		a, err := m.LoadAdapter(adapter)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if err := ctx.SetAdapter(a, 1); err != nil {
			t.Fatal(err)
		}
	}
	p, err := m.Tokenize(prompt, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if logits, err = ctx.Logits(p); err != nil {
		t.Fatal(err)
	}
	seqs, err := ctx.Generate(context.Background(), p, llama.SampleParams{MaxTokens: 24, IgnoreEOG: true})
	if err != nil {
		t.Fatal(err)
	}
	return logits, seqs[0].Text, seqs[0].Tokens
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestExportMergedMatchesAdapter: llama.cpp gives the same logits (≤ 1e-4)
// and greedy text from the merged F32 GGUF as from base + adapter.
func TestExportMergedMatchesAdapter(t *testing.T) {
	dir := t.TempDir()
	model := tinyModel(t, dir, "base.gguf", nil)
	adapter := filepath.Join(dir, "a.gguf")
	mustCLI(t, "lora", "init", "--model", model, "--rank", "4", "--alpha", "8", "--seed", "11", "--random-b", "--out", adapter)
	exported := filepath.Join(dir, "exported.gguf")
	mustCLI(t, "export", "--model", model, "--lora", adapter, "--out", exported)
	merged := filepath.Join(dir, "merged.gguf")
	mustCLI(t, "export", "--model", model, "--lora", adapter, "--merged", "--out", merged)

	const prompt = "The quick brown fox jumps over"
	lb, _, _ := llamaRun(t, model, "", prompt)
	la, ta, toka := llamaRun(t, model, exported, prompt)
	lm, tm, tokm := llamaRun(t, merged, "", prompt)
	if d := maxAbsDiff(lb, la); d < 1e-2 {
		t.Fatalf("the random-B adapter barely changes the logits (max diff %g): the comparison would prove nothing", d)
	}
	if d := maxAbsDiff(la, lm); d > 1e-4 {
		t.Errorf("merged logits differ from base+adapter by %g (> 1e-4)", d)
	}
	if ta != tm || len(toka) != len(tokm) {
		t.Errorf("greedy text: base+adapter %q, merged %q", ta, tm)
	}
	for i := range toka {
		if i < len(tokm) && toka[i] != tokm[i] {
			t.Errorf("greedy token %d: base+adapter %d, merged %d", i, toka[i], tokm[i])
			break
		}
	}
	// The exported adapter equals the input (F32 copy).
	a1, _ := lora.Read(adapter)
	a2, err := lora.Read(exported)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range a1.Pairs {
		if maxAbsDiff(p.A, a2.Pairs[i].A) != 0 || maxAbsDiff(p.B, a2.Pairs[i].B) != 0 {
			t.Fatalf("export changed %s", p.Base)
		}
	}

	// F16: adapted weights stored as F16 load in llama.cpp and stay close.
	merged16 := filepath.Join(dir, "merged16.gguf")
	mustCLI(t, "export", "--model", model, "--lora", adapter, "--merged", "--type", "f16", "--out", merged16)
	f, err := gguf.Open(merged16)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("blk.0.attn_q.weight")
	f.Close()
	if ti.Type != gguf.TypeF16 {
		t.Errorf("--type f16 merged tensor is %s", ti.Type)
	}
	l16, _, _ := llamaRun(t, merged16, "", prompt)
	if d := maxAbsDiff(la, l16); d > 5e-2 {
		t.Errorf("F16 merged logits differ by %g", d)
	}
}

func TestExportErrors(t *testing.T) {
	dir := t.TempDir()
	model := tinyModel(t, dir, "base.gguf", nil)
	adapter := filepath.Join(dir, "a.gguf")
	mustCLI(t, "lora", "init", "--model", model, "--rank", "2", "--out", adapter)
	out := filepath.Join(dir, "out.gguf")
	wantFail(t, []string{"no such file"}, "export", "--model", model, "--lora", filepath.Join(dir, "none.gguf"), "--out", out)
	wantFail(t, []string{"no such file"}, "export", "--model", filepath.Join(dir, "none.gguf"), "--lora", adapter, "--out", out)
	data, _ := os.ReadFile(adapter)
	trunc := filepath.Join(dir, "trunc.gguf")
	os.WriteFile(trunc, data[:len(data)*2/3], 0o644)
	wantFail(t, []string{"trunc"}, "export", "--model", model, "--lora", trunc, "--out", out)
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("not a gguf file, only text\n"), 0o644)
	wantFail(t, []string{"not a gguf"}, "export", "--model", model, "--lora", junk, "--out", out)
	wantFail(t, []string{"not a lora adapter"}, "export", "--model", model, "--lora", model, "--out", out)
	wantFail(t, []string{"not a base model"}, "export", "--model", adapter, "--lora", adapter, "--out", out, "--merged")
	wide := tinyModel(t, dir, "wide.gguf", func(c *modelgen.Config) { c.Hidden = 96; c.Heads = 6 })
	wantFail(t, []string{"does not fit", "shape"}, "export", "--model", wide, "--lora", adapter, "--out", out, "--merged")
	deep := tinyModel(t, dir, "deep.gguf", func(c *modelgen.Config) { c.Layers = 1 })
	wantFail(t, []string{"does not exist in the base model"}, "export", "--model", deep, "--lora", adapter, "--out", out)
	wantFail(t, []string{"--type"}, "export", "--model", model, "--lora", adapter, "--out", out, "--type", "bf16")
	wantFail(t, []string{"overwrite"}, "export", "--model", model, "--lora", adapter, "--out", adapter)
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("failed exports left %s behind", out)
	}
	// llama.cpp agrees that the mismatched adapter does not fit.
	m, err := llama.LoadModel(wide, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if a, err := m.LoadAdapter(adapter); err == nil {
		a.Close()
		t.Error("llama.cpp accepted an adapter for another base model")
	}
}
