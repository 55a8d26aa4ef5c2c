package cgo

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
)

func loadFullTiny(t testing.TB, cfg modelgen.Config, opts Options) *Model {
	t.Helper()
	m, err := LoadFull(tinyModel(t, cfg), opts)
	if err != nil {
		t.Fatalf("LoadFull: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// nllBatch: three random sequences, the second half of each trained (the
// SFT objective needs no old log-probs or advantages).
func nllBatch(rng *rand.Rand, vocab int) []Sequence {
	var batch []Sequence
	for _, L := range []int{11, 8, 14} {
		s := Sequence{Tokens: randTokens(rng, L, vocab), Trained: make([]bool, L), OldLogp: make([]float32, L), Advantage: make([]float32, L)}
		for i := L / 2; i < L; i++ {
			s.Trained[i] = true
		}
		batch = append(batch, s)
	}
	return batch
}

func nllObjective() Objective {
	o := DefaultObjective()
	o.NLL = true
	return o
}

func paramIndex(t testing.TB, m *Model, name string) int {
	t.Helper()
	for i, p := range m.Params() {
		if p.Name == name {
			return i
		}
	}
	t.Fatalf("no parameter %s", name)
	return -1
}

// TestFullParams: every tensor of the file is a parameter, in the file's
// order, with the documented metadata; no LoRA; weights equal the file's.
func TestFullParams(t *testing.T) {
	for _, tied := range []bool{false, true} {
		cfg := tinyCfg()
		cfg.TiedEmbeddings = tied
		m := loadFullTiny(t, cfg, Options{Threads: 1})
		f, err := gguf.Open(tinyModel(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ps := m.Params()
		if len(ps) != len(f.Tensors) || !m.Full() || m.Info().TiedEmbeddings != tied {
			t.Fatalf("tied=%v: %d params for %d tensors, full %v", tied, len(ps), len(f.Tensors), m.Full())
		}
		vals := mustParams(t, m)
		for i, ti := range f.Tensors {
			p := ps[i]
			if p.Name != ti.Name || p.Base != ti.Name || !sameShape(ti.Shape, p.Shape) || p.Target != "" || p.IsB {
				t.Fatalf("param %d: %+v, file tensor %s %v", i, p, ti.Name, ti.Shape)
			}
			if want := blockOf(ti.Name); p.Layer != want {
				t.Fatalf("%s: layer %d, want %d", p.Name, p.Layer, want)
			}
			data, err := f.ReadTensorF32(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			for j := range data {
				if data[j] != vals[i][j] {
					t.Fatalf("%s[%d] = %v, file %v", ti.Name, j, vals[i][j], data[j])
				}
			}
		}
		if _, err := m.ReadAdapter(); !errors.Is(err, ErrConfig) {
			t.Fatalf("ReadAdapter on a full model: %v", err)
		}
		if m.LoRA().Rank != 0 {
			t.Fatalf("LoRA config %+v", m.LoRA())
		}
		// the params, grads and two moments: 4× the F32 model (+ padding)
		var n int64
		for _, p := range ps {
			n += int64(p.Shape[0] * p.Shape[1])
		}
		mem := m.MemoryBytes()
		if mem.Params < 16*n || mem.Params > 16*n+int64(len(ps))*16*16+4*4096*4+1024 || mem.Weights != 0 || mem.Transposed != 0 {
			t.Fatalf("memory %+v for %d parameters", mem, n)
		}
		t.Logf("tied=%v: %d tensors, %d parameters, params buffer %d bytes (%.3f× 16 B/param)", tied, len(ps), n, mem.Params, float64(mem.Params)/float64(16*n))
	}
}

// TestFullGradientFiniteDifference: ∂loss/∂θ of full training against
// central differences of the loss, for each new kind of parameter: an
// embedding row, norm weights, q/k/v biases, every matrix, the untied
// output head, and a tied model's token_embd (lookup + head).
func TestFullGradientFiniteDifference(t *testing.T) {
	for _, tied := range []bool{false, true} {
		name := map[bool]string{false: "untied", true: "tied"}[tied]
		t.Run(name, func(t *testing.T) {
			cfg := tinyCfg()
			cfg.TiedEmbeddings = tied
			m := loadFullTiny(t, cfg, Options{Threads: 1})
			rng := rand.New(rand.NewPCG(11, 13))
			batch := nllBatch(rng, cfg.Vocab)
			obj := nllObjective()
			obj.EntropyCoef = 0.3 // the entropy path too
			mustZero(t, m)
			if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
				t.Fatal(err)
			}
			grads := mustGrads(t, m)
			params := mustParams(t, m)
			infos := m.Params()
			names := []string{"token_embd.weight", "output_norm.weight",
				"blk.0.attn_norm.weight", "blk.1.ffn_norm.weight",
				"blk.0.attn_q.bias", "blk.1.attn_k.bias", "blk.0.attn_v.bias"}
			for _, mat := range []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"} {
				names = append(names, "blk.0."+mat+".weight", "blk.1."+mat+".weight")
			}
			if !tied {
				names = append(names, "output.weight")
			}
			const eps = 1e-2
			worst, checked := 0.0, 0
			for _, n := range names {
				pi := paramIndex(t, m, n)
				g := grads[pi]
				idx := []int{0}
				for i := range g {
					if math.Abs(float64(g[i])) > math.Abs(float64(g[idx[0]])) {
						idx[0] = i
					}
				}
				if g[idx[0]] == 0 {
					t.Fatalf("%s: zero gradient", n)
				}
				if n == "token_embd.weight" {
					// besides the largest element, the largest one of the row of
					// the first input token (untied: the lookup's gradient
					// only; tied: lookup + head, in one accumulator)
					C := infos[pi].Shape[0]
					tok := int(batch[0].Tokens[0])
					row := tok * C
					best := row
					for i := row; i < row+C; i++ {
						if math.Abs(float64(g[i])) > math.Abs(float64(g[best])) {
							best = i
						}
					}
					idx = append(idx, best)
				}
				for _, i := range idx {
					orig := params[pi][i]
					loss := func(x float32) float64 {
						params[pi][i] = x
						if err := m.WriteParams(params); err != nil {
							t.Fatal(err)
						}
						st, err := m.Evaluate(batch, obj, 0)
						if err != nil {
							t.Fatal(err)
						}
						return st.Loss
					}
					fd := (loss(orig+eps) - loss(orig-eps)) / (2 * eps)
					params[pi][i] = orig
					rel := math.Abs(fd-float64(g[i])) / math.Max(math.Abs(float64(g[i])), 1e-12)
					worst = math.Max(worst, rel)
					checked++
					if rel > 1e-2 {
						t.Errorf("%s[%d]: analytic %.6g, finite difference %.6g, rel err %.3g", n, i, g[i], fd, rel)
					}
				}
			}
			if err := m.WriteParams(params); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d elements checked, worst relative error %.3g", name, checked, worst)
		})
	}
}

// TestFullRewriteMatchesAutograd: dX = MUL_MAT(cont(Wᵀ), dY) made in the
// graph from the current W gives autograd's gradients, also after W moved;
// one rewritten node per matrix (7 per block + the head).
func TestFullRewriteMatchesAutograd(t *testing.T) {
	for _, tied := range []bool{false, true} {
		cfg := tinyCfg()
		cfg.TiedEmbeddings = tied
		rw := loadFullTiny(t, cfg, Options{Threads: 1})
		ag := loadFullTiny(t, cfg, Options{Threads: 1, AutogradFrozenBackward: true})
		rng := rand.New(rand.NewPCG(3, 4))
		batch := nllBatch(rng, cfg.Vocab)
		obj := nllObjective()
		step := AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, MaxGradNorm: 1}
		for s := 1; s <= 2; s++ {
			for _, m := range []*Model{rw, ag} {
				mustZero(t, m)
				if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
					t.Fatal(err)
				}
			}
			if n := rw.MemoryBytes().Rewritten; n != 7*cfg.Layers+1 {
				t.Fatalf("rewritten %d, want %d", n, 7*cfg.Layers+1)
			}
			if n := ag.MemoryBytes().Rewritten; n != 0 {
				t.Fatalf("autograd mode rewrote %d nodes", n)
			}
			rel := relL2(mustGrads(t, rw), mustGrads(t, ag))
			t.Logf("tied=%v step %d: gradient relative L2 %.3g", tied, s, rel)
			if rel > 1e-5 {
				t.Fatalf("gradients differ: relative L2 %.3g", rel)
			}
			step.Step = int64(s)
			for _, m := range []*Model{rw, ag} {
				if _, _, err := m.AdamWStep(step); err != nil {
					t.Fatal(err)
				}
			}
			// both take the step from (nearly) the same gradients: continue from the same weights
			if err := ag.WriteParams(mustParams(t, rw)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFullSaveLoadsInLlama: after a few full-training steps, SaveFull
// writes a GGUF that llama.cpp loads and whose log-probs equal the training
// graph's on the same weights (tied and untied).
func TestFullSaveLoadsInLlama(t *testing.T) {
	for _, tied := range []bool{false, true} {
		cfg := tinyCfg()
		cfg.TiedEmbeddings = tied
		src := tinyModel(t, cfg)
		m := loadFullTiny(t, cfg, Options{Threads: 1})
		rng := rand.New(rand.NewPCG(21, 22))
		seqs := [][]int32{randTokens(rng, 40, cfg.Vocab), randTokens(rng, 17, cfg.Vocab), randTokens(rng, 3, cfg.Vocab)}
		before, err := m.LogProbsBatch(seqs)
		if err != nil {
			t.Fatal(err)
		}
		batch := nllBatch(rng, cfg.Vocab)
		for s := int64(1); s <= 3; s++ {
			mustZero(t, m)
			if _, err := m.ForwardBackward(batch, nllObjective(), 0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := m.AdamWStep(AdamWParams{LR: 2e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: s}); err != nil {
				t.Fatal(err)
			}
		}
		ours, err := m.LogProbsBatch(seqs)
		if err != nil {
			t.Fatal(err)
		}
		moved := maxLogpShift(ours, before)
		if moved < 1e-2 {
			t.Fatalf("training moved the log-probs by only %.3g", moved)
		}
		out := filepath.Join(t.TempDir(), "trained.gguf")
		if err := m.SaveFull(out, map[string]string{"empo2.test": "full"}); err != nil {
			t.Fatal(err)
		}
		// the written file: the source's metadata (in order) + ours, F32 tensors
		sf, _ := gguf.Open(src)
		of, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range sf.Keys() {
			if of.Keys()[i] != k {
				t.Fatalf("metadata key %d: %q, source %q", i, of.Keys()[i], k)
			}
		}
		if v, _ := of.String("empo2.test"); v != "full" {
			t.Fatalf("meta empo2.test = %q", v)
		}
		if len(of.Tensors) != len(sf.Tensors) {
			t.Fatalf("%d tensors, source %d", len(of.Tensors), len(sf.Tensors))
		}
		sf.Close()
		of.Close()

		_, lc := llamaF32Context(t, out)
		worst := checkLlamaScores(t, lc, seqs, ours, fmt.Sprintf("tied=%v", tied))
		// the loaded file also equals the graph reloaded from it
		m2, err := LoadFull(out, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		again, err := m2.LogProbsBatch(seqs)
		m2.Close()
		if err != nil {
			t.Fatal(err)
		}
		for b := range seqs {
			for i := range seqs[b] {
				if again[b][i] != ours[b][i] {
					t.Fatalf("reloaded graph: seq %d token %d: %v vs %v", b, i, again[b][i], ours[b][i])
				}
			}
		}
		t.Logf("tied=%v: training moved log-probs by up to %.3g; llama.cpp vs graph max |Δ logp| = %.2g", tied, moved, worst)
	}
}

// TestFullRefuses: a non-F32 model (clear ErrConfig naming the tensor and
// its type, never an abort), a file with a tensor the graph does not use,
// SaveFull on a LoRA model, adapters on a full model.
func TestFullRefuses(t *testing.T) {
	cfg := tinyCfg()
	cfg.DType = "f16"
	_, err := LoadFull(tinyModel(t, cfg), Options{Threads: 1})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "f16") || !strings.Contains(err.Error(), ".weight") {
		t.Fatalf("F16 model: %v", err)
	}
	t.Logf("F16: %v", err)

	// an F32 file with one tensor more than the graph reads
	w := modelWriter(t, tinyModel(t, tinyCfg()))
	if err := w.AddTensorF32("extra.weight", []uint64{4}, []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(t.TempDir(), "extra.gguf")
	if err := w.WriteFile(extra); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFull(extra, Options{Threads: 1}); !errors.Is(err, ErrUnsupportedArch) || !strings.Contains(err.Error(), "extra.weight") {
		t.Fatalf("extra tensor: %v", err)
	}
	// the LoRA loader still reads that file (it ignores unknown tensors)
	if m, err := Load(extra, LoRAConfig{Rank: 2, Alpha: 4}, Options{Threads: 1}); err != nil {
		t.Fatalf("LoRA load of the file with an extra tensor: %v", err)
	} else {
		if err := m.SaveFull(filepath.Join(t.TempDir(), "x.gguf"), nil); !errors.Is(err, ErrConfig) {
			t.Fatalf("SaveFull on a LoRA model: %v", err)
		}
		m.Close()
	}
	m := loadFullTiny(t, tinyCfg(), Options{Threads: 1})
	if err := m.WriteAdapter(&lora.Adapter{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("WriteAdapter: %v", err)
	}
	mom, vel, err := m.Moments()
	if err != nil || len(mom) != len(m.Params()) || len(vel) != len(mom) {
		t.Fatalf("Moments: %v", err)
	}
}
