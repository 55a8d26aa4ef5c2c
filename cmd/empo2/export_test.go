package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/optim"
)

func loraMustCLI(t *testing.T, args ...string) {
	t.Helper()
	if _, stderr, err := runCLI(t, args...); err != nil {
		t.Fatalf("empo2 %v: %v\n%s", args, err, stderr)
	}
}

// llamaRun loads model (plus adapter when not "") in llama.cpp and returns
// the logits after prompt and the greedy continuation of 24 tokens.
func loraLlamaRun(t *testing.T, model, adapter string, prompt string) (logits []float32, text string, toks []int32) {
	t.Helper()
	m, ctx := llamaWithAdapter(t, model, adapter, 256)
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

func loraMaxAbsDiff(a, b []float32) float64 {
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
	model := loraTinyModel(t, dir, "base.gguf", nil)
	adapter := filepath.Join(dir, "a.gguf")
	loraMustCLI(t, "lora", "init", "--model", model, "--rank", "4", "--alpha", "8", "--seed", "11", "--random-b", "--out", adapter)
	exported := filepath.Join(dir, "exported.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", adapter, "--out", exported)
	merged := filepath.Join(dir, "merged.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", adapter, "--merged", "--out", merged)

	const prompt = "The quick brown fox jumps over"
	lb, _, _ := loraLlamaRun(t, model, "", prompt)
	la, ta, toka := loraLlamaRun(t, model, exported, prompt)
	lm, tm, tokm := loraLlamaRun(t, merged, "", prompt)
	if d := loraMaxAbsDiff(lb, la); d < 1e-2 {
		t.Fatalf("the random-B adapter barely changes the logits (max diff %g): the comparison would prove nothing", d)
	}
	t.Logf("max |logit diff|: adapter vs base %g, merged vs base+adapter %g", loraMaxAbsDiff(lb, la), loraMaxAbsDiff(la, lm))
	if d := loraMaxAbsDiff(la, lm); d > 1e-4 {
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
		if loraMaxAbsDiff(p.A, a2.Pairs[i].A) != 0 || loraMaxAbsDiff(p.B, a2.Pairs[i].B) != 0 {
			t.Fatalf("export changed %s", p.Base)
		}
	}

	// F16: adapted weights stored as F16 load in llama.cpp and stay close.
	merged16 := filepath.Join(dir, "merged16.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", adapter, "--merged", "--type", "f16", "--out", merged16)
	f, err := gguf.Open(merged16)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("blk.0.attn_q.weight")
	f.Close()
	if ti.Type != gguf.TypeF16 {
		t.Errorf("--type f16 merged tensor is %s", ti.Type)
	}
	l16, _, _ := loraLlamaRun(t, merged16, "", prompt)
	if d := loraMaxAbsDiff(la, l16); d > 5e-2 {
		t.Errorf("F16 merged logits differ by %g", d)
	}
	// An F16 adapter file loads in llama.cpp and stays close too.
	a16 := filepath.Join(dir, "a16.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", adapter, "--type", "f16", "--out", a16)
	la16, _, _ := loraLlamaRun(t, model, a16, prompt)
	if d := loraMaxAbsDiff(la, la16); d > 5e-2 || d == 0 {
		t.Errorf("F16 adapter logits differ by %g (want small but non-zero)", d)
	}
}

func TestExportErrors(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "base.gguf", nil)
	adapter := filepath.Join(dir, "a.gguf")
	loraMustCLI(t, "lora", "init", "--model", model, "--rank", "2", "--out", adapter)
	out := filepath.Join(dir, "out.gguf")
	loraWantFail(t, []string{"no such file"}, "export", "--model", model, "--lora", filepath.Join(dir, "none.gguf"), "--out", out)
	loraWantFail(t, []string{"no such file"}, "export", "--model", filepath.Join(dir, "none.gguf"), "--lora", adapter, "--out", out)
	data, _ := os.ReadFile(adapter)
	trunc := filepath.Join(dir, "trunc.gguf")
	os.WriteFile(trunc, data[:len(data)*2/3], 0o644)
	loraWantFail(t, []string{"trunc"}, "export", "--model", model, "--lora", trunc, "--out", out)
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("not a gguf file, only text\n"), 0o644)
	loraWantFail(t, []string{"not a gguf"}, "export", "--model", model, "--lora", junk, "--out", out)
	loraWantFail(t, []string{"not a lora adapter"}, "export", "--model", model, "--lora", model, "--out", out)
	loraWantFail(t, []string{"not a base model"}, "export", "--model", adapter, "--lora", adapter, "--out", out, "--merged")
	wide := loraTinyModel(t, dir, "wide.gguf", func(c *modelgen.Config) { c.Hidden = 96; c.Heads = 6 })
	loraWantFail(t, []string{"does not fit", "shape"}, "export", "--model", wide, "--lora", adapter, "--out", out, "--merged")
	deep := loraTinyModel(t, dir, "deep.gguf", func(c *modelgen.Config) { c.Layers = 1 })
	loraWantFail(t, []string{"does not exist in the base model"}, "export", "--model", deep, "--lora", adapter, "--out", out)
	loraWantFail(t, []string{"--dtype"}, "export", "--model", model, "--lora", adapter, "--out", out, "--type", "bf16")
	loraWantFail(t, []string{"overwrite"}, "export", "--model", model, "--lora", adapter, "--out", adapter)
	before, _ := os.ReadFile(model)
	loraWantFail(t, []string{"overwrite"}, "export", "--model", model, "--lora", adapter, "--out", dir+"/./base.gguf", "--merged")
	if after, _ := os.ReadFile(model); string(after) != string(before) {
		t.Fatal("export overwrote its base model")
	}
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

// TestExportStateMatchesTrainingGraph: a state saved by the trainer after
// real updates, exported through the CLI, loads in llama.cpp and gives the
// training graph's log-probs (cgo LogProbs) for the same weights; the merged
// export gives them too.
func TestExportStateMatchesTrainingGraph(t *testing.T) {
	dir := t.TempDir()
	model := loraTinyModel(t, dir, "base.gguf", nil)
	pol, err := cgo.Load(model, cgo.LoRAConfig{Rank: 4, Alpha: 8, Seed: 2, Targets: []string{"q", "k", "o", "up", "down"}},
		cgo.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	u, err := optim.NewUpdater(pol, optim.Config{
		AdamW: optim.DefaultAdamW(), MaxGradNorm: 1, Objective: cgo.DefaultObjective(),
		Schedule: optim.Schedule{Kind: optim.ScheduleConstant, BaseLR: 0.05},
	})
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 50, 60, 70, 80, 90, 100, 110, 120}
	for i := 0; i < 3; i++ {
		old, err := pol.LogProbs(toks)
		if err != nil {
			t.Fatal(err)
		}
		s := cgo.Sequence{Tokens: toks, Trained: make([]bool, len(toks)), OldLogp: old, Advantage: make([]float32, len(toks))}
		for j := 4; j < len(toks); j++ {
			s.Trained[j], s.Advantage[j] = true, 1
		}
		if _, err := u.Update([]cgo.Sequence{s}); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(dir, "state.gguf")
	if err := u.Save(state); err != nil {
		t.Fatal(err)
	}
	adapter := filepath.Join(dir, "adapter.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", state, "--out", adapter)
	merged := filepath.Join(dir, "merged.gguf")
	loraMustCLI(t, "export", "--model", model, "--lora", state, "--merged", "--out", merged)
	a, err := lora.Read(adapter)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Meta) != 0 {
		t.Errorf("training metadata leaked into the exported adapter: %v", a.Meta)
	}
	want, err := pol.LogProbs(toks)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, model, adapter string }{{"adapter", model, adapter}, {"merged", merged, ""}} {
		m, err := llama.LoadModel(c.model, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		if c.adapter != "" {
			if bad, err := m.LoadAdapter(state); err == nil {
				bad.Close()
				t.Error("llama.cpp loaded a training-state file as an adapter")
			}
			la, err := m.LoadAdapter(c.adapter)
			if err != nil {
				t.Fatal(err)
			}
			defer la.Close()
			if err := ctx.SetAdapter(la, 1); err != nil {
				t.Fatal(err)
			}
		}
		got, err := ctx.Score(context.Background(), toks[:1], toks[1:])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: max |log-prob diff| llama.cpp vs training graph %g", c.name, loraMaxAbsDiff(got, want[1:]))
		if d := loraMaxAbsDiff(got, want[1:]); d > 1e-4 {
			t.Errorf("%s: llama.cpp log-probs differ from the training graph's by %g", c.name, d)
		}
		ctx.Close()
		m.Close()
	}
	// The trained adapter is not the identity: a fresh policy disagrees.
	fresh, err := cgo.Load(model, cgo.LoRAConfig{Rank: 4, Alpha: 8, Seed: 2, Targets: []string{"q", "k", "o", "up", "down"}}, cgo.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	lp0, _ := fresh.LogProbs(toks)
	if d := loraMaxAbsDiff(lp0, want); d < 1e-2 {
		t.Fatalf("training barely changed the log-probs (%g): the comparison proves nothing", d)
	}
}

// llamaWithAdapter loads model in llama.cpp with a context of nctx tokens
// and, when adapter is not "", the adapter attached at scale 1; all are
// closed when the test ends.
func llamaWithAdapter(t *testing.T, model, adapter string, nctx int) (*llama.Model, *llama.Context) {
	t.Helper()
	m, err := llama.LoadModel(model, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: nctx, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	if adapter != "" {
		a, err := m.LoadAdapter(adapter)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		if err := ctx.SetAdapter(a, 1); err != nil {
			t.Fatal(err)
		}
	}
	return m, ctx
}
