package optim

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/empo2/empo2/cgo"
)

var _ BackendOptimizer = (*cgo.Model)(nil) // the training graph steps on its backend

// TestBackendAdamWMatchesHost: the backend AdamW (ggml's
// GGML_OP_OPT_STEP_ADAMW in float32, norm and clipping on the backend) and
// the Go AdamW (float64 per element, the reference checked against
// PyTorch's formula in optim_test.go) agree over 8 steps with weight decay,
// clipping on some steps and not on others, and changing gradients: the bias
// correction step count, hyperparameter order and the clipping coefficient
// are all exercised. Moments are compared too.
func TestBackendAdamWMatchesHost(t *testing.T) {
	sizes := []int{37, 5, 300, 64}
	o, err := cgo.NewOptimizer(sizes, cgo.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.05}
	host, _ := NewAdamW(cfg, sizes)
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
	params := mk(0.5)
	if err := o.Set(cgo.OptParam, params); err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 8; step++ {
		grads := mk(0.1 * float64(step))
		if err := o.Set(cgo.OptGrad, grads); err != nil {
			t.Fatal(err)
		}
		maxNorm := 3.0 // clips the larger gradients of later steps only
		lr := 1e-2 / float64(step)
		gn, gc, err := o.Step(cgo.AdamWParams{LR: lr, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps,
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
	got := mk(0)
	if err := o.Get(cgo.OptParam, got); err != nil {
		t.Fatal(err)
	}
	gm, gv := mk(0), mk(0)
	_ = o.Get(cgo.OptM, gm)
	_ = o.Get(cgo.OptV, gv)
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

	// a non-finite gradient is refused before anything changes
	bad := mk(1)
	bad[2][7] = float32(math.Inf(1))
	_ = o.Set(cgo.OptGrad, bad)
	if _, _, err := o.Step(cgo.AdamWParams{LR: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 9}); !errors.Is(err, cgo.ErrNonFinite) {
		t.Fatalf("Inf gradient: %v", err)
	}
	after := mk(0)
	_ = o.Get(cgo.OptParam, after)
	for i := range after {
		if !bitsEq(after[i], got[i]) {
			t.Fatal("a refused step changed the parameters")
		}
	}
	if _, _, err := o.Step(cgo.AdamWParams{LR: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 0}); !errors.Is(err, cgo.ErrConfig) {
		t.Errorf("step 0: %v", err)
	}
}

// qwen7BRank8Sizes: the LoRA tensors of Qwen2.5-7B at rank 8 on all seven
// projections (28 layers × 720,896 = 20.2 M parameters).
func qwen7BRank8Sizes() []int {
	const layers, r = 28, 8
	shapes := [][2]int{{3584, 3584}, {3584, 512}, {3584, 512}, {3584, 3584}, {3584, 18944}, {3584, 18944}, {18944, 3584}}
	var sizes []int
	for l := 0; l < layers; l++ {
		for _, s := range shapes {
			sizes = append(sizes, s[0]*r, r*s[1])
		}
	}
	return sizes
}

// BenchmarkAdamWBackend7BRank8 is BenchmarkAdamWStep7BRank8 (the Go AdamW
// on host memory, the old path) on the training backend: gradient norm,
// clipping and GGML_OP_OPT_STEP_ADAMW over the same 20.2 M parameters, with
// parameters, gradients and moments resident in the backend's buffers (CPU
// here; 1 thread and all cores: ggml's spinning thread barriers make the
// multi-threaded run slow when the cores are shared).
func BenchmarkAdamWBackend7BRank8(b *testing.B) {
	b.Run("threads=1", func(b *testing.B) { benchAdamWBackend(b, 1) })
	b.Run("threads=all", func(b *testing.B) { benchAdamWBackend(b, 0) })
}

func benchAdamWBackend(b *testing.B, threads int) {
	sizes := qwen7BRank8Sizes()
	o, err := cgo.NewOptimizer(sizes, cgo.Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	grads := make([][]float32, len(sizes))
	n := 0
	for i, s := range sizes {
		grads[i] = make([]float32, s)
		for j := range grads[i] {
			grads[i][j] = float32(rng.NormFloat64())
		}
		n += s
	}
	if err := o.Set(cgo.OptGrad, grads); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n) * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := o.Step(cgo.AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: int64(i + 1), MaxGradNorm: 1e9}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "params")
}
