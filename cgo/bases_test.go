package cgo

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
)

// quantCfg: rows of 256 (hidden 256, FFN 512) so that the k-quants apply
// to every matrix instead of llama.cpp's fallback types.
func quantCfg() modelgen.Config {
	c := modelgen.DefaultConfig()
	c.Hidden, c.Heads, c.KVHeads, c.FFN = 256, 4, 2, 512
	return c
}

// quantizedBase writes the model src as typ with llama.cpp's quantizer and,
// beside it, that file dequantized to F32 by llama.cpp (the reference the
// quantized training graph is compared with); it returns both paths.
func quantizedBase(t testing.TB, src, typ string) (q, dq string) {
	t.Helper()
	dir := t.TempDir()
	q, dq = filepath.Join(dir, typ+".gguf"), filepath.Join(dir, typ+"-dequantized.gguf")
	if err := llama.Quantize(src, q, llama.QuantizeParams{Type: typ, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	if err := llama.Quantize(q, dq, llama.QuantizeParams{Type: "f32", Threads: 1, AllowRequantize: true, Pure: true}); err != nil {
		t.Fatal(err)
	}
	return q, dq
}

// tensorTypes counts the types of a GGUF's 2-D weights.
func tensorTypes(t testing.TB, path string) map[string]int {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	for _, ti := range f.Tensors {
		if len(ti.Shape) == 2 {
			out[ti.Type.String()]++
		}
	}
	return out
}

// TestQuantizedBases: LoRA training on the bases people download — Q8_0,
// Q4_0 and Q4_K_M made by llama.cpp's own quantizer (llama.Quantize, as
// llama-quantize) — loaded with Load and, as `train` does, with LoadShared
// on llama.cpp's loaded tensors, each with stored Wᵀ and with
// TransposeInGraph (the same F16 Wᵀ made in the graph: bit-identical
// gradients, nothing stored; SharedTransposedBytes predicts the stored
// bytes). Each keeps its matrices quantized (F16 Wᵀ
// copies for dX) and trains like the F32 model holding the same weights as
// llama.cpp dequantizes them: log-probs and gradients agree to the
// precision of ggml's quantized mul_mat, which also quantizes the
// activations (to 8 bits: Q8_0 for Q8_0/Q4_0, Q8_K for the k-quants), so
// the comparison is with the dequantized model, not the F32 original; and
// LoadShared equals Load bit for bit.
func TestQuantizedBases(t *testing.T) {
	src := tinyModel(t, quantCfg())
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}
	for _, c := range []struct {
		typ   string
		types []string // 2-D tensor types the file must hold
	}{
		{"q8_0", []string{"Q8_0"}},
		{"q4_0", []string{"Q4_0"}},
		{"q4_k_m", []string{"Q4_K", "Q6_K"}},
	} {
		t.Run(c.typ, func(t *testing.T) {
			q, dq := quantizedBase(t, src, c.typ)
			types := tensorTypes(t, q)
			for _, want := range c.types {
				if types[want] == 0 {
					t.Fatalf("%s file has no %s matrix: %v", c.typ, want, types)
				}
			}
			m, ref := mustLoad(t, q, lora, Options{Threads: 1}), mustLoad(t, dq, lora, Options{Threads: 1})
			if ref.Info().WeightType != "f32" || m.Info().WeightType == "f32" {
				t.Fatalf("weights stored as %s / %s", m.Info().WeightType, ref.Info().WeightType)
			}
			lm, err := llama.LoadModel(q, llama.ModelParams{})
			if err != nil {
				t.Fatal(err)
			}
			defer lm.Close()
			sh, err := LoadShared(lm, lora, Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer sh.Close()
			// Wᵀ made in the graph (dequantized, transposed, F16) instead of stored
			ig := mustLoad(t, q, lora, Options{Threads: 1, TransposeInGraph: true})
			shig, err := LoadShared(lm, lora, Options{Threads: 1, TransposeInGraph: true})
			if err != nil {
				t.Fatal(err)
			}
			defer shig.Close()
			stored, err := SharedTransposedBytes(lm)
			if err != nil {
				t.Fatal(err)
			}
			if got := sh.MemoryBytes().Transposed; stored != got || stored == 0 {
				t.Fatalf("SharedTransposedBytes %d, LoadShared stored %d", stored, got)
			}
			if a, b := ig.MemoryBytes().Transposed, shig.MemoryBytes().Transposed; a != 0 || b != 0 {
				t.Fatalf("in-graph transposes stored %d (Load) and %d (LoadShared) bytes", a, b)
			}

			lps, grads := quantRun(t, 40, ref, m, sh, ig, shig)
			for i := range lps[1] {
				if math.Float32bits(lps[1][i]) != math.Float32bits(lps[2][i]) {
					t.Fatalf("LoadShared log-prob %d: %v, Load %v", i, lps[2][i], lps[1][i])
				}
			}
			// the in-graph Wᵀ holds the stored copy's values: same gradients, bit for bit
			for k, name := range map[int]string{3: "Load", 4: "LoadShared"} {
				if !equalParams(grads[1], grads[k]) {
					t.Fatalf("%s with TransposeInGraph: gradients differ from the stored Wᵀ's (relative L2 %.3g)", name, relL2(grads[k], grads[1]))
				}
			}
			worst := maxAbsDiff(lps[1], lps[0])
			if worst > 0.1 { // measured 0.03–0.06 (8-bit activations); a wrong layout is nats off
				t.Fatalf("%s vs dequantized-F32 log-probs differ by %v", c.typ, worst)
			}
			rel := relL2(grads[1], grads[0])
			if rel > 0.1 { // measured 0.02–0.04; a wrong Wᵀ gives O(1)
				t.Fatalf("%s vs dequantized-F32 gradients: relative L2 %.3g", c.typ, rel)
			}
			if !equalParams(grads[1], grads[2]) {
				t.Fatal("LoadShared gradients differ from Load's")
			}
			mem := m.MemoryBytes()
			t.Logf("%s %v: max |Δ logp| %.3g, gradient relative L2 %.3g vs dequantized F32; weights %d B (F16 Wᵀ %d B), F32 reference %d B",
				c.typ, types, worst, rel, mem.Weights, mem.Transposed, ref.MemoryBytes().Weights)
		})
	}
}

// TestInGraphTransposeTransient: with TransposeInGraph the training graph
// holds the transient Wᵀ of one matrix at a time. Its compute buffer (ggml's
// allocator, measured on the same 40-token step as with stored Wᵀ) may
// exceed the stored-Wᵀ graph's by the copies of the largest matrix — F16
// Wᵀ for an F16 base; F32 dequantized + F16 Wᵀ (6 bytes per element) for
// Q8_0 — with room for the allocator's placement, but never by the copies
// of every matrix (here 6 layers: 29× the largest), which is what a graph
// that computes all Wᵀ before the backward, or copies them into leafs
// (allocated for the whole graph), needs. Gradients stay bit-identical.
func TestInGraphTransposeTransient(t *testing.T) {
	cfg := quantCfg()
	cfg.Layers = 6
	f16 := cfg
	f16.DType = "f16"
	q8 := filepath.Join(t.TempDir(), "q8.gguf")
	writeQ8Model(t, tinyModel(t, cfg), q8, "")
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}
	C, F, KV, V := int64(cfg.Hidden), int64(cfg.FFN), int64(cfg.KVHeads*cfg.Hidden/cfg.Heads), int64(cfg.Vocab)
	largest := max(C*F, C*V, C*C)                       // elements of the largest matrix
	all := int64(cfg.Layers)*(2*C*C+2*C*KV+3*C*F) + C*V // of all matrices with a Wᵀ (untied head)
	for _, c := range []struct {
		name    string
		path    string
		perElem int64 // bytes of the transient copies per element
	}{
		{"f16", tinyModel(t, f16), 2},
		{"q8_0", q8, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			stored := mustLoad(t, c.path, lora, Options{Threads: 1})
			inGraph := mustLoad(t, c.path, lora, Options{Threads: 1, TransposeInGraph: true})
			_, grads := quantRun(t, 40, stored, inGraph)
			if !equalParams(grads[0], grads[1]) {
				t.Fatalf("in-graph Wᵀ gradients differ from the stored Wᵀ's (relative L2 %.3g)", relL2(grads[1], grads[0]))
			}
			ms, mi := stored.MemoryBytes(), inGraph.MemoryBytes()
			if ms.Transposed == 0 || mi.Transposed != 0 || ms.Rewritten != mi.Rewritten || mi.Rewritten == 0 {
				t.Fatalf("stored Wᵀ %d / %d bytes, rewritten %d / %d", ms.Transposed, mi.Transposed, ms.Rewritten, mi.Rewritten)
			}
			extra := mi.Compute - ms.Compute
			one := c.perElem * largest
			t.Logf("%s: training compute %d B with stored Wᵀ, %d B in-graph: +%d B = %.2f× the largest matrix's copies (all matrices' would be %.1f×)",
				c.name, ms.Compute, mi.Compute, extra, float64(extra)/float64(one), float64(all)/float64(largest))
			if extra > 2*one {
				t.Fatalf("in-graph Wᵀ adds %d B of compute buffer, above 2× the copies of the largest matrix (%d B): the copies of several matrices are alive at once (all: %d B)",
					extra, 2*one, c.perElem*all)
			}
		})
	}
}

// TestUntrainableTensorType: a matrix of a type the graph cannot read
// (here F64) is refused with ErrTensorType naming the tensor and the type.
func TestUntrainableTensorType(t *testing.T) {
	src := tinyModel(t, tinyCfg())
	const bad = "blk.1.ffn_up.weight"
	w := modelWriter(t, src, bad)
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, _ := f.Tensor(bad)
	x, err := f.ReadTensorF32(bad)
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 0, 8*len(x))
	for _, v := range x {
		raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(float64(v)))
	}
	if err := w.AddTensorRaw(bad, ti.Shape, gguf.TypeF64, raw); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "f64.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, LoRAConfig{Rank: 2, Alpha: 4}, Options{Threads: 1})
	if !errors.Is(err, ErrTensorType) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "f64") {
		t.Fatalf("got %v, want ErrTensorType naming %s and f64", err, bad)
	}
}

// TestSplitModelTrains: a model written as 3 split files (gguf-split's
// layout) loads from its first file, through the engine's own reader
// (Load, LoadFull) and through llama.cpp's (LoadShared), and trains exactly
// like the unsplit file: log-probs and gradients bit for bit; a later split
// or a missing one is a clear error.
func TestSplitModelTrains(t *testing.T) {
	src := tinyModel(t, tinyCfg())
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := gguf.WriteSplits(f, filepath.Join(dir, "tiny"), 3)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 5, RandomB: true}
	whole := loadTiny(t, tinyCfg(), lora, Options{Threads: 1})
	split, err := Load(paths[0], lora, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer split.Close()
	lm, err := llama.LoadModel(paths[0], llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	shared, err := LoadShared(lm, lora, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	rng := rand.New(rand.NewPCG(8, 9))
	batch := fdBatch(t, whole, rng)
	want, err := whole.LogProbs(batch[0].Tokens)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole.ForwardBackward(batch, DefaultObjective(), 0); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*Model{"Load": split, "LoadShared": shared} {
		got, err := m.LogProbs(batch[0].Tokens)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s of the split model: log-prob %d %v, unsplit %v", name, i, got[i], want[i])
			}
		}
		if _, err := m.ForwardBackward(batch, DefaultObjective(), 0); err != nil {
			t.Fatal(err)
		}
		if !equalParams(mustGrads(t, m), mustGrads(t, whole)) {
			t.Fatalf("%s of the split model: gradients differ", name)
		}
	}
	full, err := LoadFull(paths[0], Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(full.Params()); n != len(loadFullTiny(t, tinyCfg(), Options{Threads: 1}).Params()) {
		t.Fatalf("LoadFull of the split model: %d parameters", n)
	}
	full.Close()
	if _, err := Load(paths[1], lora, Options{Threads: 1}); !errors.Is(err, ErrIO) {
		t.Fatalf("loading the second split: got %v, want ErrIO", err)
	}
}
