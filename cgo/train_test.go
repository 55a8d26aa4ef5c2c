package cgo

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/modelgen"
)

func loadTiny(t testing.TB, cfg modelgen.Config, lora LoRAConfig, opts Options) *Model {
	t.Helper()
	m, err := Load(tinyModel(t, cfg), lora, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// mustLoad loads the GGUF at path (Load), closed when the test ends.
func mustLoad(t testing.TB, path string, lora LoRAConfig, opts Options) *Model {
	t.Helper()
	m, err := Load(path, lora, opts)
	if err != nil {
		t.Fatalf("Load %s: %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func randTokens(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

// fdBatch builds a batch whose trained tokens sit well inside each region of
// the clipped objective at the current parameters: unclipped (r = 1),
// ε-clipped (A > 0, r = e), unclipped with A < 0 and r = e, dual-clipped
// (A < 0, r = e^3 > c = 10), clipped low (A < 0, r = 1/e), plus a sequence
// dropped by low-probability masking.
func fdBatch(t *testing.T, m *Model, rng *rand.Rand) []Sequence {
	t.Helper()
	V := m.Info().NVocab
	var batch []Sequence
	kinds := [][2]float64{ // (log-ratio logp − old, advantage)
		{0, 1.0}, {0, -0.7}, {1, 0.8}, {1, -0.6}, {3, -1.2}, {-1, -0.9}, {-1, 1.1}, {0.1, 0.5},
	}
	lens := []int{9, 12, 7}
	k := 0
	for _, L := range lens {
		toks := randTokens(rng, L, V)
		lp, err := m.LogProbs(toks)
		if err != nil {
			t.Fatal(err)
		}
		seq := Sequence{Tokens: toks, Trained: make([]bool, L), OldLogp: make([]float32, L), Advantage: make([]float32, L), RefLogp: make([]float32, L)}
		for i := L / 3; i < L; i++ {
			kd := kinds[k%len(kinds)]
			k++
			seq.Trained[i] = true
			seq.OldLogp[i] = lp[i] - float32(kd[0])
			seq.Advantage[i] = float32(kd[1])
			seq.RefLogp[i] = lp[i] + float32(rng.NormFloat64()*0.3)
			if seq.OldLogp[i] > 0 {
				seq.OldLogp[i] = 0
			}
			if seq.RefLogp[i] > 0 {
				seq.RefLogp[i] = 0
			}
		}
		batch = append(batch, seq)
	}
	// a sequence its caller masked (low-probability masking clears Trained,
	// trainer.BuildSamples): no trained token, left out of the loss
	toks := randTokens(rng, 8, V)
	masked := Sequence{Tokens: toks, Trained: make([]bool, 8), OldLogp: make([]float32, 8), Advantage: make([]float32, 8), RefLogp: make([]float32, 8)}
	for i := 4; i < 8; i++ {
		masked.OldLogp[i] = -9
		masked.Advantage[i] = 3
	}
	batch = append(batch, masked)
	return batch
}

// TestGradientFiniteDifference checks d(loss)/d(A, B) of the full objective
// against central differences of the loss value (Evaluate), for clipped,
// unclipped, dual-clipped tokens and a masked (untrained) sequence in one
// batch.
func TestGradientFiniteDifference(t *testing.T) {
	objs := map[string]Objective{"ppo-dualclip-token-mean": DefaultObjective()}
	o := DefaultObjective()
	o.KLCoef, o.EntropyCoef, o.Aggregation = 0.3, 0.5, AggSeqMeanTokenMean // large enough that a wrong entropy or KL gradient moves the sampled elements well past 1e-2
	objs["kl-entropy-seq-mean"] = o
	for name, obj := range objs {
		t.Run(name, func(t *testing.T) {
			m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}, Options{Threads: 1})
			rng := rand.New(rand.NewPCG(7, 7))
			batch := fdBatch(t, m, rng)
			mustZero(t, m)
			st, err := m.ForwardBackward(batch, obj, 0)
			if err != nil {
				t.Fatal(err)
			}
			if st.Sequences != len(batch)-1 || st.ClipFrac == 0 || st.DualClipFrac == 0 {
				t.Fatalf("batch does not exercise every region: %+v", st)
			}
			grads := mustGrads(t, m)
			params := mustParams(t, m)
			infos := m.Params()
			const eps = 1e-2
			checked := 0
			worst := 0.0
			for pi := range infos {
				if infos[pi].Layer != 0 && infos[pi].Layer != 1 {
					continue
				}
				// the largest-gradient element and two random ones above 20% of it
				g := grads[pi]
				imax := 0
				for i := range g {
					if math.Abs(float64(g[i])) > math.Abs(float64(g[imax])) {
						imax = i
					}
				}
				if g[imax] == 0 {
					t.Fatalf("%s: zero gradient", infos[pi].Name)
				}
				idx := []int{imax}
				for tries := 0; tries < 200 && len(idx) < 2; tries++ {
					i := rng.IntN(len(g))
					if math.Abs(float64(g[i])) > 0.2*math.Abs(float64(g[imax])) && i != imax {
						idx = append(idx, i)
					}
				}
				if pi%5 != 0 { // sample: every tensor's max, extra elements on some
					idx = idx[:1]
				}
				for _, i := range idx {
					orig := params[pi][i]
					params[pi][i] = orig + eps
					if err := m.WriteParams(params); err != nil {
						t.Fatal(err)
					}
					sp, err := m.Evaluate(batch, obj, 0)
					if err != nil {
						t.Fatal(err)
					}
					params[pi][i] = orig - eps
					if err := m.WriteParams(params); err != nil {
						t.Fatal(err)
					}
					sm, err := m.Evaluate(batch, obj, 0)
					if err != nil {
						t.Fatal(err)
					}
					params[pi][i] = orig
					fd := (sp.Loss - sm.Loss) / (2 * eps)
					rel := math.Abs(fd-float64(g[i])) / math.Max(math.Abs(float64(g[i])), 1e-12)
					worst = math.Max(worst, rel)
					checked++
					if rel > 1e-2 {
						t.Errorf("%s[%d]: analytic %.6g, finite difference %.6g, rel err %.3g", infos[pi].Name, i, g[i], fd, rel)
					}
				}
			}
			if err := m.WriteParams(params); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d elements checked, worst relative error %.3g; stats %+v", checked, worst, st)
		})
	}
}

// TestTransposeInGraph: in-graph transposes give the same gradients as the
// stored transposed copies, on an F16 model, and store no copies.
func TestTransposeInGraph(t *testing.T) {
	cfg := tinyCfg()
	cfg.DType = "f16"
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 5, RandomB: true}
	stored := loadTiny(t, cfg, lora, Options{Threads: 1})
	inGraph := loadTiny(t, cfg, lora, Options{Threads: 1, TransposeInGraph: true})
	if mem := inGraph.MemoryBytes(); mem.Transposed != 0 || stored.MemoryBytes().Transposed == 0 {
		t.Fatalf("transposed bytes: in-graph %d, stored %d", mem.Transposed, stored.MemoryBytes().Transposed)
	}
	batch := fdBatch(t, stored, rand.New(rand.NewPCG(8, 9)))
	for _, m := range []*Model{stored, inGraph} {
		if _, err := m.ForwardBackward(batch, DefaultObjective(), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := inGraph.MemoryBytes().Rewritten; n != 7*cfg.Layers-2 {
		t.Fatalf("rewritten %d", n)
	}
	if rel := relL2(mustGrads(t, inGraph), mustGrads(t, stored)); rel > 1e-6 {
		t.Fatalf("gradients differ: relative L2 %.3g", rel)
	}
}

// TestRewriteMatchesAutograd: gradients with the transposed-weight backward
// equal plain ggml autograd (OUT_PROD) on the same F32 model.
func TestRewriteMatchesAutograd(t *testing.T) {
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 5, RandomB: true}
	cfg := tinyCfg()
	cfg.TiedEmbeddings = true
	fast := loadTiny(t, cfg, lora, Options{Threads: 1})
	slow := loadTiny(t, cfg, lora, Options{Threads: 1, AutogradFrozenBackward: true})
	rng := rand.New(rand.NewPCG(1, 2))
	batch := fdBatch(t, fast, rng)
	obj := DefaultObjective()
	obj.EntropyCoef = 0.01
	sf, err := fast.ForwardBackward(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := slow.ForwardBackward(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(sf.Loss-ss.Loss) > 1e-5*math.Max(1, math.Abs(sf.Loss)) {
		t.Fatalf("loss differs: %v vs %v", sf.Loss, ss.Loss)
	}
	mf, ms := fast.MemoryBytes(), slow.MemoryBytes()
	// per layer 7 frozen linears + the head, minus layer 0's q, k, v whose
	// input (the normed embedding) needs no gradient
	if want := 7*fast.Info().NLayer + 1 - 3; mf.Rewritten != want || ms.Rewritten != 0 {
		t.Fatalf("rewritten OUT_PROD nodes: %d (want %d), autograd model %d (want 0)", mf.Rewritten, want, ms.Rewritten)
	}
	// per LoRA pair dB and dX through B (first operand with the rank as ne0),
	// per layer the attention's dQ and dK (first operand with the head dim as ne0)
	if want := 2*7*fast.Info().NLayer + 2*fast.Info().NLayer; mf.RewrittenLoRA != want || ms.RewrittenLoRA != 0 {
		t.Fatalf("rewritten LoRA OUT_PROD nodes: %d (want %d), autograd model %d (want 0)", mf.RewrittenLoRA, want, ms.RewrittenLoRA)
	}
	if mf.Pinned == 0 {
		t.Fatal("no RMS_NORM_BACK operand pinned")
	}
	gf, gs := mustGrads(t, fast), mustGrads(t, slow)
	var num, den float64
	for i := range gf {
		for j := range gf[i] {
			d := float64(gf[i][j] - gs[i][j])
			num += d * d
			den += float64(gs[i][j]) * float64(gs[i][j])
		}
	}
	if den == 0 || math.Sqrt(num/den) > 1e-4 {
		t.Fatalf("gradients differ: relative L2 %.3g (|g|² %.3g)", math.Sqrt(num/den), den)
	}
	t.Logf("relative L2 difference %.3g", math.Sqrt(num/den))
}

// TestAccumulation: gradients add across calls until ZeroGrads; a loss scale
// scales them.
func TestAccumulation(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 9, RandomB: true}, Options{Threads: 1})
	rng := rand.New(rand.NewPCG(3, 4))
	batch := fdBatch(t, m, rng)
	obj := DefaultObjective()
	if _, err := m.ForwardBackward(batch, obj, 0.25); err != nil {
		t.Fatal(err)
	}
	g1 := mustGrads(t, m)
	if _, err := m.ForwardBackward(batch, obj, 0.5); err != nil {
		t.Fatal(err)
	}
	g3 := mustGrads(t, m)
	for i := range g1 {
		for j := range g1[i] {
			if d := math.Abs(float64(g3[i][j] - 3*g1[i][j])); d > 1e-5*math.Abs(float64(g3[i][j]))+1e-9 {
				t.Fatalf("param %d[%d]: after 0.25+0.5 scales got %v, want 3×%v", i, j, g3[i][j], g1[i][j])
			}
		}
	}
	mustZero(t, m)
	for _, g := range mustGrads(t, m) {
		for _, x := range g {
			if x != 0 {
				t.Fatal("ZeroGrads left a nonzero gradient")
			}
		}
	}
	// token-mean over two micro-batches with lossScale = 1/total equals one call
	tok, _ := CountTrained(batch)
	if _, err := m.ForwardBackward(batch[:2], obj, float32(1/float64(tok))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForwardBackward(batch[2:], obj, float32(1/float64(tok))); err != nil {
		t.Fatal(err)
	}
	gs := mustGrads(t, m)
	mustZero(t, m)
	if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
		t.Fatal(err)
	}
	gw := mustGrads(t, m)
	// padding differs (T = longest sequence of each call), so the sums run in
	// another order: compare as a whole
	if rel := relL2(gs, gw); rel > 1e-4 {
		t.Fatalf("micro-batched vs whole mini-batch gradient: relative L2 %.3g", rel)
	}
}

func sgdStep(t *testing.T, m *Model, lr float32) {
	p := mustParams(t, m)
	g := mustGrads(t, m)
	for i := range p {
		for j := range p[i] {
			p[i][j] -= lr * g[i][j]
		}
	}
	if err := m.WriteParams(p); err != nil {
		t.Fatal(err)
	}
	mustZero(t, m)
}

// TestPolicyDirection: SGD on a positive advantage raises the sequence's
// log-prob, a negative one lowers it (fresh adapter, B = 0).
func TestPolicyDirection(t *testing.T) {
	for _, adv := range []float32{1, -1} {
		m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 4, Alpha: 8, Seed: 1}, Options{Threads: 1})
		rng := rand.New(rand.NewPCG(11, 12))
		toks := randTokens(rng, 10, m.Info().NVocab)
		sum := func() float64 {
			lp, err := m.LogProbs(toks)
			if err != nil {
				t.Fatal(err)
			}
			s := 0.0
			for i := 5; i < len(lp); i++ {
				s += float64(lp[i])
			}
			return s
		}
		before := sum()
		for step := 0; step < 5; step++ {
			lp, _ := m.LogProbs(toks) // on-policy: old = current
			seq := Sequence{Tokens: toks, Trained: make([]bool, 10), OldLogp: lp, Advantage: make([]float32, 10)}
			for i := 5; i < 10; i++ {
				seq.Trained[i] = true
				seq.Advantage[i] = adv
			}
			if _, err := m.ForwardBackward([]Sequence{seq}, DefaultObjective(), 0); err != nil {
				t.Fatal(err)
			}
			sgdStep(t, m, 0.5)
		}
		after := sum()
		t.Logf("advantage %+v: sum logp %.4f -> %.4f", adv, before, after)
		if (adv > 0 && !(after > before+1e-3)) || (adv < 0 && !(after < before-1e-3)) {
			t.Fatalf("advantage %v: log-prob moved the wrong way: %.5f -> %.5f", adv, before, after)
		}
	}
}

// TestF16Trains: an F16 model goes through forward and backward (no OUT_PROD
// abort) and a step with a positive advantage raises the log-prob.
func TestF16Trains(t *testing.T) {
	cfg := tinyCfg()
	cfg.DType = "f16"
	m := loadTiny(t, cfg, LoRAConfig{Rank: 4, Alpha: 8, Seed: 1}, Options{Threads: 1})
	if m.Info().WeightType != "f16" {
		t.Fatalf("weights stored as %s, want f16", m.Info().WeightType)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	toks := randTokens(rng, 12, m.Info().NVocab)
	lp0, err := m.LogProbs(toks)
	if err != nil {
		t.Fatal(err)
	}
	seq := Sequence{Tokens: toks, Trained: make([]bool, 12), OldLogp: lp0, Advantage: make([]float32, 12)}
	for i := 6; i < 12; i++ {
		seq.Trained[i] = true
		seq.Advantage[i] = 1
	}
	for step := 0; step < 3; step++ {
		if seq.OldLogp, err = m.LogProbs(toks); err != nil { // on-policy: r = 1, never clipped
			t.Fatal(err)
		}
		if _, err := m.ForwardBackward([]Sequence{seq}, DefaultObjective(), 0); err != nil {
			t.Fatal(err)
		}
		nz := 0
		for _, g := range mustGrads(t, m) {
			for _, x := range g {
				if !finite32(x) {
					t.Fatal("non-finite gradient")
				}
				if x != 0 {
					nz++
				}
			}
		}
		if nz == 0 {
			t.Fatal("all gradients zero")
		}
		sgdStep(t, m, 0.5)
	}
	lp1, _ := m.LogProbs(toks)
	var s0, s1 float64
	for i := 6; i < 12; i++ {
		s0 += float64(lp0[i])
		s1 += float64(lp1[i])
	}
	if !(s1 > s0) {
		t.Fatalf("F16: log-prob did not rise: %v -> %v", s0, s1)
	}
}

// TestErrors: bad inputs give typed errors, never an abort.
func TestErrors(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4}, Options{Threads: 1})
	V := m.Info().NVocab
	good := func() Sequence {
		return Sequence{Tokens: []int32{1, 2, 3, 4}, Trained: []bool{false, false, true, true},
			OldLogp: []float32{0, 0, -1, -2}, Advantage: []float32{0, 0, 1, 1}}
	}
	obj := DefaultObjective()
	cases := []struct {
		name string
		mut  func(*Sequence, *Objective) float32
		want error
	}{
		{"short trained", func(s *Sequence, _ *Objective) float32 { s.Trained = s.Trained[:3]; return 0 }, ErrShape},
		{"short oldlogp", func(s *Sequence, _ *Objective) float32 { s.OldLogp = nil; return 0 }, ErrShape},
		{"token range", func(s *Sequence, _ *Objective) float32 { s.Tokens[1] = int32(V); return 0 }, ErrShape},
		{"negative token", func(s *Sequence, _ *Objective) float32 { s.Tokens[0] = -1; return 0 }, ErrShape},
		{"trained first", func(s *Sequence, _ *Objective) float32 { s.Trained[0] = true; return 0 }, ErrShape},
		{"one token", func(s *Sequence, _ *Objective) float32 {
			*s = Sequence{Tokens: []int32{1}, Trained: []bool{false}, OldLogp: []float32{0}, Advantage: []float32{0}}
			return 0
		}, ErrShape},
		{"nan advantage", func(s *Sequence, _ *Objective) float32 { s.Advantage[2] = float32(math.NaN()); return 0 }, ErrNonFinite},
		{"inf oldlogp", func(s *Sequence, _ *Objective) float32 { s.OldLogp[3] = float32(math.Inf(-1)); return 0 }, ErrNonFinite},
		{"positive oldlogp", func(s *Sequence, _ *Objective) float32 { s.OldLogp[3] = 0.5; return 0 }, ErrNonFinite},
		{"nan loss scale", func(s *Sequence, _ *Objective) float32 { return float32(math.NaN()) }, ErrNonFinite},
		{"kl without ref", func(s *Sequence, o *Objective) float32 { o.KLCoef = 0.1; return 0 }, ErrShape},
		{"nan ref", func(s *Sequence, o *Objective) float32 {
			o.KLCoef = 0.1
			s.RefLogp = []float32{0, 0, float32(math.NaN()), -1}
			return 0
		}, ErrNonFinite},
		{"bad aggregation", func(s *Sequence, o *Objective) float32 { o.Aggregation = "sum"; return 0 }, ErrConfig},
		{"no policy loss", func(s *Sequence, o *Objective) float32 { o.Policy = nil; return 0 }, ErrConfig},
		{"nan entropy coefficient", func(s *Sequence, o *Objective) float32 { o.EntropyCoef = float32(math.NaN()); return 0 }, ErrNonFinite},
		{"too long", func(s *Sequence, _ *Objective) float32 {
			n := m.Info().NCtxTrain + 1
			*s = Sequence{Tokens: make([]int32, n), Trained: make([]bool, n), OldLogp: make([]float32, n), Advantage: make([]float32, n)}
			s.Trained[n-1] = true
			return 0
		}, ErrShape},
	}
	for _, c := range cases {
		s, o := good(), obj
		scale := c.mut(&s, &o)
		_, err := m.ForwardBackward([]Sequence{s}, o, scale)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := m.ForwardBackward(nil, obj, 0); !errors.Is(err, ErrShape) {
		t.Errorf("empty batch: %v", err)
	}
	if _, err := m.LogProbs([]int32{1, int32(V) + 5}); !errors.Is(err, ErrShape) {
		t.Errorf("LogProbs token range: %v", err)
	}
	p := mustParams(t, m)
	if err := m.WriteParams(p[:1]); !errors.Is(err, ErrShape) {
		t.Errorf("WriteParams count: %v", err)
	}
	p[0] = p[0][:1]
	if err := m.WriteParams(p); !errors.Is(err, ErrShape) {
		t.Errorf("WriteParams size: %v", err)
	}
	p = mustParams(t, m)
	p[1][0] = float32(math.Inf(1))
	if err := m.WriteParams(p); !errors.Is(err, ErrNonFinite) {
		t.Errorf("WriteParams inf: %v", err)
	}
	// no trained token (every sequence masked by its caller): no error,
	// nothing trained; cgo itself masks nothing (an old log-prob far below
	// δ = −5 is trained)
	s := good()
	clear(s.Trained)
	st, err := m.ForwardBackward([]Sequence{s}, obj, 0)
	if err != nil || st.Tokens != 0 || st.Sequences != 0 {
		t.Errorf("batch without trained tokens: %+v, %v", st, err)
	}
	s = good()
	s.OldLogp[2] = -7
	if st, err := m.Evaluate([]Sequence{s}, obj, 0); err != nil || st.Tokens != trainedCount(&s) || st.Sequences != 1 {
		t.Errorf("an old log-prob below −5: %+v, %v (cgo must not mask)", st, err)
	}
	// still usable after errors
	if _, err := m.ForwardBackward([]Sequence{good()}, obj, 0); err != nil {
		t.Fatalf("model unusable after errors: %v", err)
	}
	// config and file errors
	path := tinyModel(t, tinyCfg())
	if _, err := Load(path, LoRAConfig{Rank: 0}, Options{}); !errors.Is(err, ErrConfig) {
		t.Errorf("rank 0: %v", err)
	}
	if _, err := Load(path, LoRAConfig{Rank: 2, Targets: []string{"qq"}}, Options{}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad target: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.gguf"), DefaultLoRAConfig(), Options{}); !errors.Is(err, ErrIO) {
		t.Errorf("missing file: %v", err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage.gguf")
	os.WriteFile(garbage, []byte("not a gguf file at all"), 0o644)
	if _, err := Load(garbage, DefaultLoRAConfig(), Options{}); !errors.Is(err, ErrIO) {
		t.Errorf("garbage file: %v", err)
	}
	// an empty dimension after the first (ggml's GGUF reader divides by it)
	empty := gguf.NewWriter()
	empty.AddKV("general.architecture", "qwen2")
	if err := empty.AddTensorF32("token_embd.weight", []uint64{4, 0}, nil); err != nil {
		t.Fatal(err)
	}
	emptyPath := filepath.Join(t.TempDir(), "empty.gguf")
	if err := empty.WriteFile(emptyPath); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(emptyPath, DefaultLoRAConfig(), Options{}); !errors.Is(err, ErrIO) {
		t.Errorf("empty dimension: %v", err)
	}
	// another architecture
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "llama")
	w.AddKV("llama.block_count", uint32(1))
	if err := w.AddTensorF32("token_embd.weight", []uint64{4, 8}, make([]float32, 32)); err != nil {
		t.Fatal(err)
	}
	llamaPath := filepath.Join(t.TempDir(), "llama.gguf")
	if err := w.WriteFile(llamaPath); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(llamaPath, DefaultLoRAConfig(), Options{}); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("llama arch: %v", err)
	}
	// devices: "auto" falls back to the CPU; "gpu" fails cleanly without one
	if ma, err := Load(path, LoRAConfig{Rank: 2}, Options{Threads: 1, Device: "auto"}); err != nil {
		t.Errorf("auto device: %v", err)
	} else {
		t.Logf("auto device: backend %s", ma.Info().Backend)
		ma.Close()
	}
	if mg, err := Load(path, LoRAConfig{Rank: 2}, Options{Threads: 1, Device: "gpu"}); err == nil {
		if mg.Info().Backend == "CPU" {
			t.Error("gpu device gave the CPU backend")
		}
		mg.Close()
	} else if !errors.Is(err, ErrBackend) {
		t.Errorf("gpu device without a GPU: %v", err)
	}
	if _, err := Load(path, LoRAConfig{Rank: 2}, Options{Device: "tpu"}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad device: %v", err)
	}
	// closed model
	m2, err := Load(path, LoRAConfig{Rank: 2}, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	m2.Close()
	m2.Close()
	if _, err := m2.LogProbs([]int32{1, 2}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
	if _, err := m2.ReadParams(); !errors.Is(err, ErrClosed) {
		t.Error("ReadParams after Close")
	}
	var nilModel *Model
	if err := nilModel.Close(); err != nil {
		t.Error(err)
	}
}

// TestTargetsAndNames: parameter names/orientation follow llama.cpp's adapter
// format; a subset of targets gives only those pairs; a fresh adapter (B = 0)
// leaves the base model's log-probs unchanged.
func TestTargetsAndNames(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 3, Alpha: 6, Targets: []string{TargetQ, TargetDown}}, Options{Threads: 1})
	ps := m.Params()
	info := m.Info()
	if len(ps) != 2*2*info.NLayer {
		t.Fatalf("%d params, want %d", len(ps), 4*info.NLayer)
	}
	want := map[string][2]int{
		"blk.0.attn_q.weight.lora_a":   {info.NEmbd, 3},
		"blk.0.attn_q.weight.lora_b":   {3, info.NEmbd},
		"blk.1.ffn_down.weight.lora_a": {info.FFN, 3},
		"blk.1.ffn_down.weight.lora_b": {3, info.NEmbd},
	}
	got := map[string][2]int{}
	for _, p := range ps {
		got[p.Name] = p.Shape
	}
	for n, s := range want {
		if got[n] != s {
			t.Errorf("%s: shape %v, want %v", n, got[n], s)
		}
	}
	// A is Kaiming-uniform within ±1/sqrt(n_in), B is zero
	vals := mustParams(t, m)
	for i, p := range ps {
		bound := float32(1 / math.Sqrt(float64(p.Shape[0])))
		nz := 0
		for _, x := range vals[i] {
			if p.IsB && x != 0 {
				t.Fatalf("%s not zero", p.Name)
			}
			if !p.IsB && (x < -bound || x > bound) {
				t.Fatalf("%s: %v outside ±%v", p.Name, x, bound)
			}
			if x != 0 {
				nz++
			}
		}
		if !p.IsB && nz == 0 {
			t.Fatalf("%s all zero", p.Name)
		}
	}
	base := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 1, Alpha: 1, Targets: []string{TargetV}}, Options{Threads: 1})
	toks := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	a, _ := m.LogProbs(toks)
	b, _ := base.LogProbs(toks)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("fresh adapter changed log-probs: %v vs %v", a, b)
		}
	}
}

func relL2(a, b [][]float32) float64 {
	var num, den float64
	for i := range a {
		for j := range a[i] {
			d := float64(a[i][j] - b[i][j])
			num += d * d
			den += float64(b[i][j]) * float64(b[i][j])
		}
	}
	if den == 0 {
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

// TestConcurrentUse: methods called from several goroutines (and a Close
// racing them) neither crash nor corrupt results: they are serialised.
func TestConcurrentUse(t *testing.T) {
	m, err := Load(tinyModel(t, tinyCfg()), LoRAConfig{Rank: 2, Alpha: 4, Seed: 1}, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 2, 3, 4, 5, 6, 7}
	want, err := m.LogProbs(toks)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			for i := 0; i < 5; i++ {
				if g%2 == 0 {
					lp, err := m.LogProbs(toks)
					if err != nil {
						done <- err
						return
					}
					for j := range lp {
						if lp[j] != want[j] {
							done <- errors.New("log-probs changed under concurrency")
							return
						}
					}
				} else {
					s := Sequence{Tokens: toks, Trained: []bool{false, false, false, true, true, true, true}, OldLogp: want, Advantage: make([]float32, 7)}
					if _, err := m.Evaluate([]Sequence{s}, DefaultObjective(), 0); err != nil {
						done <- err
						return
					}
					_, _ = m.Grads()
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	go m.Close()
	for i := 0; i < 20; i++ {
		if _, err := m.LogProbs(toks); err != nil && !errors.Is(err, ErrClosed) {
			t.Fatal(err)
		}
	}
	m.Close()
}

// rewriteModel copies the GGUF at src to a new file with the metadata keys in
// set replaced or added.
func rewriteModel(t *testing.T, src string, set map[string]any) string {
	t.Helper()
	w := modelWriter(t, src)
	for k, v := range set {
		w.AddKV(k, v)
	}
	p := filepath.Join(t.TempDir(), "rewritten.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// modelWriter returns a gguf.Writer that holds a copy of the GGUF at src
// (gguf.Writer.CopyMetadata, then every tensor's data as stored, but the
// tensors named in skip), for a test to change before writing it.
func modelWriter(t *testing.T, src string, skip ...string) *gguf.Writer {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	w.CopyMetadata(f)
	for _, ti := range f.Tensors {
		if slices.Contains(skip, ti.Name) {
			continue
		}
		raw, err := f.ReadTensorRaw(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensorRaw(ti.Name, ti.Shape, ti.Type, raw); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// TestRefusesUnsupportedVariants: Qwen2 GGUFs whose hyperparameters this
// graph does not implement (RoPE scaling, odd head dim) or that lie about
// their size are refused with ErrUnsupportedArch, never loaded wrongly or
// aborted on; the unmodified copy loads (the rewrite itself is sound).
func TestRefusesUnsupportedVariants(t *testing.T) {
	src := tinyModel(t, tinyCfg())
	lora := LoRAConfig{Rank: 2, Alpha: 4}
	if m, err := Load(rewriteModel(t, src, nil), lora, Options{Threads: 1}); err != nil {
		t.Fatalf("unmodified copy: %v", err)
	} else {
		m.Close()
	}
	for name, set := range map[string]map[string]any{
		"yarn":          {"qwen2.rope.scaling.type": "yarn", "qwen2.rope.scaling.factor": float32(4)},
		"linear rope":   {"qwen2.rope.scale_linear": float32(2)},
		"odd head dim":  {"qwen2.attention.head_count": uint32(64), "qwen2.attention.head_count_kv": uint32(64)},
		"huge blocks":   {"qwen2.block_count": uint32(1 << 28)},
		"nan rope base": {"qwen2.rope.freq_base": float32(math.NaN())},
		"string heads":  {"qwen2.attention.head_count": "four"},
	} {
		_, err := Load(rewriteModel(t, src, set), lora, Options{Threads: 1})
		if !errors.Is(err, ErrUnsupportedArch) {
			t.Errorf("%s: got %v, want ErrUnsupportedArch", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
