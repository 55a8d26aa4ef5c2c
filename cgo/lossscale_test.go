package cgo

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/internal/qwentok"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
)

// relDiff is ‖a − b‖₂ / ‖b‖₂ over every tensor.
func relDiff(a, b [][]float32) float64 {
	var num, den float64
	for i := range b {
		for j := range b[i] {
			d := float64(a[i][j]) - float64(b[i][j])
			num += d * d
			den += float64(b[i][j]) * float64(b[i][j])
		}
	}
	return math.Sqrt(num / den)
}

// scaleErrors trains one batch on m at loss scales s·k and returns, per k,
// ‖G(s·k)/k − G(s)‖ / ‖G(s)‖: a gradient must scale exactly with the loss
// scale, so anything else is rounding of the backward.
func scaleErrors(t *testing.T, m *Model, batch []Sequence, ks []float64) []float64 {
	t.Helper()
	tok, _ := CountTrained(batch)
	s := 1 / float64(tok) // the token mean of this batch
	grad := func(scale float64) [][]float32 {
		mustZero(t, m)
		if _, err := m.ForwardBackward(batch, DefaultObjective(), float32(scale)); err != nil {
			t.Fatal(err)
		}
		return mustGrads(t, m)
	}
	ref := grad(s)
	out := make([]float64, len(ks))
	for i, k := range ks {
		g := grad(s * k)
		for _, x := range g {
			for j := range x {
				x[j] = float32(float64(x[j]) / k)
			}
		}
		out[i] = relDiff(g, ref)
	}
	return out
}

// scaleBatch: two sequences of 48 tokens, the last 24 trained, old
// log-probs near the model's own and mixed advantages (some tokens
// clipped, some dual-clipped).
func scaleBatch(t *testing.T, m *Model) []Sequence {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	var batch []Sequence
	for b := 0; b < 2; b++ {
		const L = 48
		toks := randTokens(rng, L, m.Info().NVocab)
		lp, err := m.LogProbs(toks)
		if err != nil {
			t.Fatal(err)
		}
		s := Sequence{Tokens: toks, Trained: make([]bool, L), OldLogp: make([]float32, L), Advantage: make([]float32, L)}
		for i := L / 2; i < L; i++ {
			s.Trained[i] = true
			s.OldLogp[i] = lp[i] - 0.4*float32(i%3-1)
			s.Advantage[i] = float32(i%5) - 2
		}
		batch = append(batch, s)
	}
	return batch
}

// TestLossScaleGradients (issue 37): on F16, Q8_0 and Q4_K_M bases with a
// real-size vocabulary (151,936 tokens, Qwen2.5's), the gradient at loss
// scale s·k divided by k equals the gradient at s to F16 storage rounding
// (≤ 2e-3 relative) for k down to 1e-4 — a mini-batch of ~10⁴–10⁵ trained
// tokens. Without loss scaling the backward rounds dY to F16 in
// dX = Wᵀ·dY and its small values underflow (the error grows as k
// shrinks: logged, and checked to be what the scaled backward removes).
// On the F32 base loss scaling is off by default, and forced on it changes
// the gradient by F32 rounding only (powers of two).
func TestLossScaleGradients(t *testing.T) {
	if testing.Short() {
		t.Skip("152k-vocabulary bases")
	}
	tok, err := modelgen.LoadHFTokenizer(qwentok.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := quantCfg()
	cfg.Layers = 1
	cfg.HFTokenizer, cfg.Vocab, cfg.TiedEmbeddings = tok, 151936, true
	src := filepath.Join(t.TempDir(), "qwen-vocab.gguf")
	if err := modelgen.Write(src, cfg); err != nil {
		t.Fatal(err)
	}
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}
	ks := []float64{1, 1e-2, 1e-3, 1e-4}

	f32 := mustLoad(t, src, lora, Options{Threads: 2})
	defer f32.Close()
	if f32.MemoryBytes().LossScaling {
		t.Fatal("loss scaling on for an F32 base")
	}
	batch := scaleBatch(t, f32)
	e := scaleErrors(t, f32, batch, ks)
	t.Logf("f32:           k=1e-2 %.2e  k=1e-3 %.2e  k=1e-4 %.2e", e[1], e[2], e[3])
	if e[3] > 1e-5 {
		t.Fatalf("F32 base: scale error %.2e at k=1e-4", e[3])
	}
	on := mustLoad(t, src, lora, Options{Threads: 2, LossScaling: 1})
	defer on.Close()
	e = scaleErrors(t, on, batch, ks)
	t.Logf("f32 scaled:    k=1e-2 %.2e  k=1e-3 %.2e  k=1e-4 %.2e", e[1], e[2], e[3])
	if e[3] > 1e-5 {
		t.Fatalf("F32 base, loss-scaled: scale error %.2e at k=1e-4", e[3])
	}

	for _, typ := range []string{"f16", "q8_0", "q4_k_m"} {
		t.Run(typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), typ+".gguf")
			if err := llama.Quantize(src, path, llama.QuantizeParams{Type: typ, Threads: 2}); err != nil {
				t.Fatal(err)
			}
			m := mustLoad(t, path, lora, Options{Threads: 2})
			defer m.Close()
			if !m.MemoryBytes().LossScaling {
				t.Fatalf("loss scaling off for a %s base", typ)
			}
			off := mustLoad(t, path, lora, Options{Threads: 2, LossScaling: -1})
			defer off.Close()
			es, eo := scaleErrors(t, m, batch, ks), scaleErrors(t, off, batch, []float64{1, 1e-4})
			t.Logf("%-6s scaled:   k=1e-2 %.2e  k=1e-3 %.2e  k=1e-4 %.2e  (log2 S = %d, skips %d)",
				typ, es[1], es[2], es[3], m.MemoryBytes().LossScaleLog2, m.MemoryBytes().LossScaleSkips)
			t.Logf("%-6s unscaled: k=1e-4 %.2e", typ, eo[1])
			for i, k := range ks {
				if es[i] > 2e-3 {
					t.Errorf("%s base: gradient at loss scale k=%g differs by %.2e from k=1 (bound 2e-3)", typ, k, es[i])
				}
			}
			if eo[1] < 4*es[3] || eo[1] < 2e-3 {
				t.Errorf("%s base: the unscaled backward's error at k=1e-4 (%.2e) is not what loss scaling removes (%.2e)", typ, eo[1], es[3])
			}
		})
	}
}

// TestBaseWeightType (issue 37): ModelInfo.WeightType names the base as
// llama.cpp names its file type (general.file_type) — a Q4_K_M base, whose
// matrices are Q4_K and Q6_K (the head, some V and FFN-down matrices), is
// "q4_K_M" with Load, with the autograd backward (matrices made F32 at
// load) and with LoadShared; without the key, the most frequent matrix type.
func TestBaseWeightType(t *testing.T) {
	src := tinyModel(t, quantCfg())
	lora := LoRAConfig{Rank: 2, Alpha: 4, Seed: 3}
	m := mustLoad(t, src, lora, Options{Threads: 1})
	if got := m.Info().WeightType; got != "f32" {
		t.Errorf("F32 base (no general.file_type): WeightType %q", got)
	}
	m.Close()
	for _, c := range []struct{ typ, want string }{{"q4_k_m", "q4_K_M"}, {"q8_0", "q8_0"}, {"f16", "f16"}} {
		path := filepath.Join(t.TempDir(), c.typ+".gguf")
		if err := llama.Quantize(src, path, llama.QuantizeParams{Type: c.typ, Threads: 1}); err != nil {
			t.Fatal(err)
		}
		for _, opts := range []Options{{Threads: 1}, {Threads: 1, AutogradFrozenBackward: true}} {
			m := mustLoad(t, path, lora, opts)
			if got := m.Info().WeightType; got != c.want {
				t.Errorf("%s base (autograd %v): WeightType %q, want %q", c.typ, opts.AutogradFrozenBackward, got, c.want)
			}
			m.Close()
		}
		lm, err := llama.LoadModel(path, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := LoadShared(lm, lora, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := sh.Info().WeightType; got != c.want {
			t.Errorf("%s base (LoadShared): WeightType %q, want %q", c.typ, got, c.want)
		}
		sh.Close()
		lm.Close()
	}
}
