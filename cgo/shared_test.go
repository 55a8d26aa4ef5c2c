package cgo

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/empo2/empo2/llama"
)

// TestLoadSharedMatchesLoad: a training graph built on llama.cpp's loaded
// tensors (LoadShared) gives the same log-probs and gradients as one that
// loads its own copy (Load), bit for bit, F32 and F16, tied and untied; it
// allocates no copy of the frozen matrices beyond the transposed ones; its
// log-probs agree with llama.cpp's own scores on the same model object
// within 1e-4 with an adapter made in memory (llama.Model.NewAdapter) from
// the policy's parameters; and the llama model stays usable by the policy
// after the caller closes it.
func TestLoadSharedMatchesLoad(t *testing.T) {
	for _, c := range []struct {
		f16, tied bool
	}{{false, false}, {false, true}, {true, false}} {
		cfg := tinyCfg()
		cfg.TiedEmbeddings = c.tied
		if c.f16 {
			cfg.DType = "f16"
		}
		path := tinyModel(t, cfg)
		lm, err := llama.LoadModel(path, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		lc := LoRAConfig{Rank: 4, Alpha: 8, Seed: 21, RandomB: true}
		own := loadTiny(t, cfg, lc, Options{Threads: 1})
		sh, err := LoadShared(lm, lc, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		if sh.Info() != own.Info() {
			t.Fatalf("info: shared %+v, own %+v", sh.Info(), own.Info())
		}
		ms, mo := sh.MemoryBytes(), own.MemoryBytes()
		if ms.Transposed != mo.Transposed || ms.Weights != ms.Transposed || mo.Weights <= mo.Transposed {
			t.Fatalf("memory: shared weights %d (transposed %d), own %d (transposed %d)", ms.Weights, ms.Transposed, mo.Weights, mo.Transposed)
		}
		if n, err := SharedTransposedBytes(lm); err != nil || n != ms.Transposed {
			t.Fatalf("SharedTransposedBytes %d (%v), LoadShared stored %d", n, err, ms.Transposed)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		seqs := [][]int32{randTokens(rng, 30, cfg.Vocab), randTokens(rng, 9, cfg.Vocab)}
		a, err := sh.LogProbsBatch(seqs)
		if err != nil {
			t.Fatal(err)
		}
		b, err := own.LogProbsBatch(seqs)
		if err != nil {
			t.Fatal(err)
		}
		if !equalParams(a, b) {
			t.Fatalf("f16=%v tied=%v: log-probs of the shared graph differ from the own-copy graph", c.f16, c.tied)
		}
		batch := []Sequence{rlSeq(seqs[0], 20, 1), rlSeq(seqs[1], 3, -0.5)}
		for _, x := range []*Model{sh, own} {
			if _, err := x.ForwardBackward(batch, DefaultObjective(), 0); err != nil {
				t.Fatal(err)
			}
		}
		if !equalParams(mustGrads(t, sh), mustGrads(t, own)) {
			t.Fatalf("f16=%v tied=%v: gradients differ", c.f16, c.tied)
		}
		// rollouts (llama.cpp, same model object, adapter from memory) agree
		ad, err := sh.ReadAdapter()
		if err != nil {
			t.Fatal(err)
		}
		la, err := lm.NewAdapter(ad)
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: 256, KVType: "f32", Threads: 1, FlashAttn: "off"})
		if err != nil {
			t.Fatal(err)
		}
		if err := ctx.SetAdapter(la, 1); err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i, s := range seqs {
			ref, err := ctx.Score(context.Background(), s[:1], s[1:])
			if err != nil {
				t.Fatal(err)
			}
			for j := range ref {
				worst = math.Max(worst, math.Abs(float64(ref[j]-a[i][j+1])))
			}
		}
		t.Logf("f16=%v tied=%v: max |Δ logp| llama.cpp vs shared training graph %.2g", c.f16, c.tied, worst)
		if bound := map[bool]float64{false: 1e-4, true: 2e-3}[c.f16]; worst > bound {
			// F16 (observed 6.3e-4): llama.cpp's attention and KV path round
			// differently from the graph's; F32 is the ≤ 1e-4 contract
			t.Errorf("f16=%v: llama.cpp and the shared graph disagree by %.3g", c.f16, worst)
		}
		ctx.Close()
		la.Close()
		// the policy keeps the llama model alive after its owner closes it
		lm.Close()
		if _, err := sh.LogProbsBatch(seqs); err != nil {
			t.Fatalf("after llama Model.Close: %v", err)
		}
		sh.Close()
		if _, err := LoadShared(lm, lc, Options{Threads: 1}); !errors.Is(err, ErrClosed) {
			t.Errorf("LoadShared on a closed model: %v", err)
		}
	}
}

// TestLoadSharedRefuses: a non-Qwen2 llama model and the autograd backward
// (which needs its own F32 weights) are refused with typed errors.
func TestLoadSharedRefuses(t *testing.T) {
	path := tinyModel(t, tinyCfg())
	lm, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	if _, err := LoadShared(lm, DefaultLoRAConfig(), Options{Threads: 1, AutogradFrozenBackward: true}); !errors.Is(err, ErrConfig) {
		t.Errorf("autograd backward: %v", err)
	}
	if _, err := LoadShared(nil, DefaultLoRAConfig(), Options{}); !errors.Is(err, ErrConfig) {
		t.Errorf("nil model: %v", err)
	}
	if _, err := SharedTransposedBytes(nil); !errors.Is(err, ErrConfig) {
		t.Errorf("SharedTransposedBytes of a nil model: %v", err)
	}
}

// rlSeq: tokens with the last n trained, advantage adv, old log-probs −1.
func rlSeq(toks []int32, n int, adv float32) Sequence {
	s := Sequence{Tokens: toks, Trained: make([]bool, len(toks)), OldLogp: make([]float32, len(toks)), Advantage: make([]float32, len(toks))}
	for i := len(toks) - n; i < len(toks); i++ {
		if i >= 1 {
			s.Trained[i] = true
			s.OldLogp[i] = -1
			s.Advantage[i] = adv
		}
	}
	return s
}
