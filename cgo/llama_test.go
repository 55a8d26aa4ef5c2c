package cgo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
)

// llamaF32Context loads the GGUF at path in llama.cpp with a context exact
// enough to compare log-probs with the training graph at 1e-4 (F32 KV
// cache, flash attention off); both are closed when the test ends.
func llamaF32Context(t *testing.T, path string) (*llama.Model, *llama.Context) {
	t.Helper()
	lm, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatalf("llama.LoadModel: %v", err)
	}
	t.Cleanup(func() { lm.Close() })
	lc, err := llama.NewContext(lm, llama.ContextParams{NCtx: 256, KVType: "f32", Threads: 1, FlashAttn: "off"})
	if err != nil {
		t.Fatalf("llama.NewContext: %v", err)
	}
	t.Cleanup(func() { lc.Close() })
	return lm, lc
}

// checkLlamaScores: the graph's per-token log-probs ours (LogProbsBatch of
// seqs: ours[b][i] = log π(seqs[b][i] | seqs[b][:i])) equal llama.cpp's
// teacher-forced scores on lc within 1e-4, an error (prefixed by label)
// for every token that differs more; it returns the largest |Δ logp|.
func checkLlamaScores(t *testing.T, lc *llama.Context, seqs [][]int32, ours [][]float32, label string) float64 {
	t.Helper()
	worst := 0.0
	for b, s := range seqs {
		ref, err := lc.Score(context.Background(), s[:1], s[1:])
		if err != nil {
			t.Fatalf("Score: %v", err)
		}
		for i := range ref {
			d := math.Abs(float64(ref[i] - ours[b][i+1]))
			worst = math.Max(worst, d)
			if d > 1e-4 {
				t.Errorf("%s seq %d token %d: graph %.6f llama %.6f", label, b, i+1, ours[b][i+1], ref[i])
			}
		}
	}
	return worst
}

// maxLogpShift is the largest |a − b| over the tokens of two LogProbsBatch
// results for the same sequences.
func maxLogpShift(a, b [][]float32) float64 {
	moved := 0.0
	for s := range a {
		for i := range a[s] {
			moved = math.Max(moved, math.Abs(float64(a[s][i]-b[s][i])))
		}
	}
	return moved
}

// writeAdapter writes m's LoRA params as a llama.cpp adapter GGUF.
func writeAdapter(t *testing.T, m *Model, path string) {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.type", "adapter")
	w.AddKV("general.architecture", "qwen2")
	w.AddKV("adapter.type", "lora")
	w.AddKV("adapter.lora.alpha", m.LoRA().Alpha)
	vals := mustParams(t, m)
	for i, p := range m.Params() {
		if err := w.AddTensorF32(p.Name, []uint64{uint64(p.Shape[0]), uint64(p.Shape[1])}, vals[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

// TestLogProbsMatchLlama: the training graph's per-token log-probs equal
// llama.cpp's teacher-forced scores (llama package) within 1e-4 on an F32
// model, without and with a LoRA adapter (nonzero B, exported in llama.cpp's
// adapter format), for tied and untied output.
func TestLogProbsMatchLlama(t *testing.T) {
	for _, tied := range []bool{false, true} {
		cfg := tinyCfg()
		cfg.TiedEmbeddings = tied
		path := tinyModel(t, cfg)
		lm, lc := llamaF32Context(t, path)

		m := loadTiny(t, cfg, LoRAConfig{Rank: 4, Alpha: 8, Seed: 21, RandomB: true}, Options{Threads: 1})
		rng := rand.New(rand.NewPCG(31, uint64(len(path))))
		seqs := [][]int32{randTokens(rng, 40, cfg.Vocab), randTokens(rng, 17, cfg.Vocab), randTokens(rng, 3, cfg.Vocab)}

		compare := func(label string) {
			ours, err := m.LogProbsBatch(seqs)
			if err != nil {
				t.Fatal(err)
			}
			worst := checkLlamaScores(t, lc, seqs, ours, fmt.Sprintf("tied=%v %s", tied, label))
			t.Logf("tied=%v %s: max |Δ logp| = %.2g", tied, label, worst)
		}
		// base model: a zero-B adapter leaves it unchanged
		params := mustParams(t, m)
		zeroB := make([][]float32, len(params))
		for i, p := range m.Params() {
			zeroB[i] = append([]float32(nil), params[i]...)
			if p.IsB {
				clear(zeroB[i])
			}
		}
		if err := m.WriteParams(zeroB); err != nil {
			t.Fatal(err)
		}
		compare("no adapter")
		plain, _ := m.LogProbsBatch(seqs)
		if err := m.WriteParams(params); err != nil {
			t.Fatal(err)
		}
		// the adapter must matter, or "with adapter" would compare nothing new
		adapted, _ := m.LogProbsBatch(seqs)
		if moved := maxLogpShift(adapted, plain); moved < 1e-2 {
			t.Fatalf("the adapter moves log-probs by only %.3g", moved)
		}
		ap := filepath.Join(t.TempDir(), "adapter.gguf")
		writeAdapter(t, m, ap)
		ad, err := lm.LoadAdapter(ap)
		if err != nil {
			t.Fatalf("LoadAdapter: %v", err)
		}
		if err := lc.SetAdapter(ad, 1); err != nil {
			t.Fatal(err)
		}
		compare("with adapter")
		lc.ClearAdapters()
		ad.Close()
	}
}

var _ = modelgen.DefaultConfig
