package cgo

import (
	"math/rand/v2"
	"testing"

	"github.com/empo2/empo2/modelgen"
)

// TestChunkedAttention: with a small AttentionBlockBytes the graph computes
// each layer's attention in query chunks and, in training, recomputes each
// chunk's softmax in the backward instead of keeping it. The log-probs and
// entropies are the same sums (bit for bit); the gradients equal the
// unchunked graph's up to the order in which the chunks' dK and dV
// contributions are added; the compute buffer of a long sequence drops from
// the L·T²·H floats of the kept softmaxes to a few chunk blocks.
func TestChunkedAttention(t *testing.T) {
	base := tinyCfg() // D = 16, 4 heads over 2 KV heads
	wide := base      // D = 64 ≥ the 64-row chunks: dK's [D, T, H] outputs as large as a chunk's block
	wide.Hidden, wide.Heads, wide.KVHeads, wide.FFN = 128, 2, 1, 256
	t.Run("d16", func(t *testing.T) { testChunkedAttention(t, base, true) })
	t.Run("d64", func(t *testing.T) { testChunkedAttention(t, wide, false) })
}

// attentionBound: the model's time and memory are mostly attention (hidden
// 64), so the chunked training graph must need under a quarter of the
// unchunked one's; a chunk order that kept every chunk's dV contribution
// alive until the dV chain needed 23 MiB here against 11.5.
func testChunkedAttention(t *testing.T, cfg modelgen.Config, attentionBound bool) {
	cfg.Ctx = 1024
	path := tinyModel(t, cfg)
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 7, RandomB: true}
	const T = 1000
	block := int64(T * T * cfg.Heads * 4) // one layer's [T, T, H] score block
	whole := mustLoad(t, path, lora, Options{Threads: 2, AttentionBlockBytes: -1})
	chunked := mustLoad(t, path, lora, Options{Threads: 2, AttentionBlockBytes: block / 16})
	defer whole.Close()
	defer chunked.Close()

	rng := rand.New(rand.NewPCG(4, 5))
	toks := randTokens(rng, T, cfg.Vocab)
	var lps [2][]float32
	for i, m := range []*Model{whole, chunked} {
		lp, err := m.LogProbs(toks)
		if err != nil {
			t.Fatal(err)
		}
		lps[i] = lp
	}
	if d := maxAbsDiff(lps[0], lps[1]); d != 0 {
		t.Fatalf("chunked attention changes the log-probs: max |Δ| %.3g", d)
	}
	mw, mc := whole.MemoryBytes(), chunked.MemoryBytes()
	if mw.AttnChunks != 1 || mc.AttnChunks < 16 {
		t.Fatalf("query chunks per layer: %d unchunked, %d chunked (want 1, ≥ 16)", mw.AttnChunks, mc.AttnChunks)
	}
	fwdWhole, fwdChunked := mw.ComputeLast, mc.ComputeLast

	seq := Sequence{Tokens: toks, Trained: make([]bool, T), OldLogp: make([]float32, T), Advantage: make([]float32, T)}
	for i := 1; i < T; i += 3 {
		seq.Trained[i] = true
		seq.OldLogp[i] = lps[0][i] - 0.03*float32(i%4)
		seq.Advantage[i] = float32(i%5) - 2
	}
	var grads [2][][]float32
	for i, m := range []*Model{whole, chunked} {
		mustZero(t, m)
		if _, err := m.ForwardBackward([]Sequence{seq}, DefaultObjective(), 0); err != nil {
			t.Fatal(err)
		}
		grads[i] = mustGrads(t, m)
	}
	mw, mc = whole.MemoryBytes(), chunked.MemoryBytes()
	if r := relL2(grads[1], grads[0]); r > 1e-5 || r != r {
		t.Fatalf("chunked attention gradients differ: relative L2 %.3g", r)
	}
	if mw.AttnRecomputed != 0 || mc.AttnRecomputed != cfg.Layers*mc.AttnChunks {
		t.Fatalf("softmaxes recomputed: %d unchunked, %d chunked (want 0, %d)", mw.AttnRecomputed, mc.AttnRecomputed, cfg.Layers*mc.AttnChunks)
	}
	t.Logf("T=%d, %d layers × %d heads: forward compute %.1f → %.1f MiB, training %.1f → %.1f MiB (%d chunks per layer)",
		T, cfg.Layers, cfg.Heads, mib(fwdWhole), mib(fwdChunked), mib(mw.Compute), mib(mc.Compute), mc.AttnChunks)
	// unchunked training keeps L blocks and needs a few more transiently;
	// chunked, a few blocks of 1/16 the size
	if mw.Compute < int64(cfg.Layers)*block {
		t.Fatalf("unchunked training compute %d B is below the %d B of its kept softmaxes: the measurement is wrong", mw.Compute, int64(cfg.Layers)*block)
	}
	if saved := mw.Compute - mc.Compute; saved < int64(cfg.Layers)*block {
		t.Fatalf("chunked training saves %.1f MiB, less than the %.1f MiB of softmaxes the unchunked graph keeps", mib(saved), mib(int64(cfg.Layers)*block))
	}
	if attentionBound && mc.Compute > mw.Compute/4 {
		t.Fatalf("chunked training compute %.1f MiB is not below a quarter of the unchunked %.1f MiB", mib(mc.Compute), mib(mw.Compute))
	}
	// the unchunked forward holds at least one whole [T, T, H] block at a
	// time, the chunked one pieces of 1/16 of it; the rest of the forward
	// (the head's [V, M] tensors among it) is the same in both
	if saved := fwdWhole - fwdChunked; saved < block*3/4 {
		t.Fatalf("chunked forward compute %.1f MiB saves %.1f MiB on the unchunked %.1f MiB, less than ¾ of the %.1f MiB score block",
			mib(fwdChunked), mib(saved), mib(fwdWhole), mib(block))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
