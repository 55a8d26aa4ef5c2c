package optim

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/internal/testutil"
)

var _ BackendOptimizer = (*cgo.Model)(nil) // the training graph steps on its backend

// TestBackendAdamWMatchesHost: the backend AdamW of the training graph
// (*cgo.Model.AdamWStep: ggml's GGML_OP_OPT_STEP_ADAMW in float32, norm
// and clipping on the backend) and the Go AdamW (float64 per element, the
// reference checked against PyTorch's formula in optim_test.go) agree over
// 8 steps with weight decay, clipping on the later steps and not the
// first, and changing gradients (the policy's own, scaled up step by step):
// the bias correction step count, hyperparameter order and the clipping
// coefficient are all exercised. Moments are compared too, and a
// non-finite gradient is refused with nothing changed.
func TestBackendAdamWMatchesHost(t *testing.T) {
	pol, err := cgo.Load(testutil.TinyModelFile(t), cgo.LoRAConfig{Rank: 4, Alpha: 8, Seed: 1}, testutil.CgoOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	var sizes []int
	for _, p := range pol.Params() {
		sizes = append(sizes, p.Shape[0]*p.Shape[1])
	}
	rng := rand.New(rand.NewPCG(4, 2))
	mk := func(scale float64) [][]float32 {
		out := make([][]float32, len(sizes))
		for i, n := range sizes {
			out[i] = make([]float32, n)
			for j := range out[i] {
				out[i][j] = float32(rng.NormFloat64() * scale)
			}
		}
		return out
	}
	params := mk(0.1) // A and B nonzero: every tensor gets a gradient
	if err := pol.WriteParams(params); err != nil {
		t.Fatal(err)
	}
	if err := pol.SetMoments(nil, nil); err != nil {
		t.Fatal(err)
	}
	obj := cgo.DefaultObjective()
	// the gradient at the current parameters, on-policy (π_old = π: ratios
	// 1, so the PPO clip never zeroes it)
	grad := func(scale float32) [][]float32 {
		t.Helper()
		batch := rlBatch(t, pol, []int32{1, 2, 3, 4, 5}, []int32{6, 7, 8}, 1)
		if err := pol.ZeroGrads(); err != nil {
			t.Fatal(err)
		}
		if _, err := pol.ForwardBackward(batch, obj, scale); err != nil {
			t.Fatal(err)
		}
		g, err := pol.Grads()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	n0, _, _ := ClipGradNorm(grad(1), 0)
	maxNorm := 1.5 * n0 // clips the larger gradients of later steps only (the norm doubles over the 8)
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.05}
	host, _ := NewAdamW(cfg, sizes)
	for step := 1; step <= 8; step++ {
		grads := grad(float32(step))
		lr := 1e-2 / float64(step)
		gn, gc, err := pol.AdamWStep(cgo.AdamWParams{LR: lr, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps,
			WeightDecay: cfg.WeightDecay, Step: int64(step), MaxGradNorm: maxNorm})
		if err != nil {
			t.Fatal(err)
		}
		hn, hc, err := ClipGradNorm(grads, maxNorm)
		if err != nil {
			t.Fatal(err)
		}
		if err := host.Step(params, grads, lr); err != nil {
			t.Fatal(err)
		}
		if math.Abs(gn-hn) > 1e-5*hn || gc != hc {
			t.Fatalf("step %d: norm %v clipped %v, host %v %v", step, gn, gc, hn, hc)
		}
		if step == 1 && gc || step == 8 && !gc {
			t.Fatalf("step %d: clipping %v: the test does not cover both cases", step, gc)
		}
	}
	got, err := pol.ReadParams()
	if err != nil {
		t.Fatal(err)
	}
	gm, gv, err := pol.Moments()
	if err != nil {
		t.Fatal(err)
	}
	// θ: absolute difference; m, v: largest difference relative to the
	// largest moment (m crosses zero, so elementwise relative errors are
	// meaningless there)
	var worst, dm, dv, maxM, maxV float64
	for i := range got {
		for j := range got[i] {
			worst = math.Max(worst, math.Abs(float64(got[i][j]-params[i][j])))
			dm = math.Max(dm, math.Abs(float64(gm[i][j]-host.M[i][j])))
			dv = math.Max(dv, math.Abs(float64(gv[i][j]-host.V[i][j])))
			maxM = math.Max(maxM, math.Abs(float64(host.M[i][j])))
			maxV = math.Max(maxV, math.Abs(float64(host.V[i][j])))
		}
	}
	worstM, worstV := dm/maxM, dv/maxV
	// 8 steps of lr ≤ 1e-2 move θ by up to ~3e-2; float32 rounding gives ~1e-8
	t.Logf("max |Δθ| %.2e, max rel Δm %.2e, Δv %.2e", worst, worstM, worstV)
	if worst > 1e-6 || worstM > 1e-5 || worstV > 1e-5 {
		t.Fatalf("backend and host AdamW disagree: |Δθ| %.2e, Δm %.2e, Δv %.2e", worst, worstM, worstV)
	}

	// a non-finite gradient is refused before anything changes: the loss
	// scaled by the largest float32 overflows the gradient to ±Inf
	grad(math.MaxFloat32)
	if _, _, err := pol.AdamWStep(cgo.AdamWParams{LR: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 9}); !errors.Is(err, cgo.ErrNonFinite) {
		t.Fatalf("Inf gradient: %v", err)
	}
	after, _ := pol.ReadParams()
	for i := range after {
		if !bitsEq(after[i], got[i]) {
			t.Fatal("a refused step changed the parameters")
		}
	}
	if _, _, err := pol.AdamWStep(cgo.AdamWParams{LR: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 0}); !errors.Is(err, cgo.ErrConfig) {
		t.Errorf("step 0: %v", err)
	}
}

// BenchmarkAdamWBackend7BRank8 is BenchmarkAdamWStep7BRank8 (the Go AdamW
// on host memory) on the training backend: gradient norm, clipping and
// GGML_OP_OPT_STEP_ADAMW over as many LoRA parameters (20.2 M), resident in
// the backend's buffers (CPU here; 1 thread and all cores: ggml's spinning
// thread barriers make the multi-threaded run slow when the cores are
// shared). The parameters are those of a generated one-layer model of
// Qwen2.5-7B's width at rank 224 (the 7B's 28 layers × rank 8 hold the
// same count; the per-tensor sizes differ, the bytes touched do not).
func BenchmarkAdamWBackend7BRank8(b *testing.B) {
	p := filepath.Join(b.TempDir(), "wide.gguf")
	mc := modelgen.Config{Layers: 1, Hidden: 3584, Heads: 28, KVHeads: 4, FFN: 18944, Vocab: 512, Ctx: 512, Seed: 1, DType: "f16"}
	if err := modelgen.Write(p, mc); err != nil {
		b.Fatal(err)
	}
	b.Run("threads=1", func(b *testing.B) { benchAdamWBackend(b, p, 1) })
	b.Run("threads=all", func(b *testing.B) { benchAdamWBackend(b, p, 0) })
}

func benchAdamWBackend(b *testing.B, model string, threads int) {
	pol, err := cgo.Load(model, cgo.LoRAConfig{Rank: 224, Alpha: 16, Seed: 1}, cgo.Options{Threads: threads, Device: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer pol.Close()
	n := 0
	for _, p := range pol.Params() {
		n += p.Shape[0] * p.Shape[1]
	}
	// a gradient on every parameter: one backward pass with A and B nonzero
	rng := rand.New(rand.NewPCG(1, 1))
	vals, err := pol.ReadParams()
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range vals {
		for j := range v {
			v[j] = float32(rng.NormFloat64() * 0.01)
		}
	}
	if err := pol.WriteParams(vals); err != nil {
		b.Fatal(err)
	}
	seq := cgo.Sequence{Tokens: []int32{1, 2, 3, 4}, Trained: []bool{false, true, true, true}, OldLogp: make([]float32, 4), Advantage: []float32{0, 1, 1, 1}}
	if _, err := pol.ForwardBackward([]cgo.Sequence{seq}, cgo.DefaultObjective(), 1); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n) * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := pol.AdamWStep(cgo.AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: int64(i + 1), MaxGradNorm: 1e9}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "params")
}
