package optim

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// adamwRef is an independent float64 transcription of PyTorch's AdamW
// documentation (decoupled decay first, then the bias-corrected Adam step),
// used to check AdamW.Step over several steps.
type adamwRef struct {
	b1, b2, eps, wd float64
	m, v            []float64
	t               int
}

func (r *adamwRef) step(p, g []float64, lr float64) {
	r.t++
	for i := range p {
		p[i] -= lr * r.wd * p[i]
		r.m[i] = r.b1*r.m[i] + (1-r.b1)*g[i]
		r.v[i] = r.b2*r.v[i] + (1-r.b2)*g[i]*g[i]
		mh := r.m[i] / (1 - math.Pow(r.b1, float64(r.t)))
		vh := r.v[i] / (1 - math.Pow(r.b2, float64(r.t)))
		p[i] -= lr * mh / (math.Sqrt(vh) + r.eps)
	}
}

func TestAdamWFirstStepClosedForm(t *testing.T) {
	// After one step from zero moments, m̂ = g and v̂ = g², so
	// θ1 = θ0(1 − lr·λ) − lr·g/(|g|+ε): a closed form independent of the
	// moment recursion.
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}
	p := [][]float32{{1, -2, 0.5}, {3}}
	g := [][]float32{{0.25, -4, 1e-3}, {-0.5}}
	lr := 0.01
	want := make([][]float64, len(p))
	for i := range p {
		for j := range p[i] {
			th, gj := float64(p[i][j]), float64(g[i][j])
			want[i] = append(want[i], th*(1-lr*cfg.WeightDecay)-lr*gj/(math.Abs(gj)+cfg.Eps))
		}
	}
	o, err := NewAdamW(cfg, []int{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Step(p, g, lr); err != nil {
		t.Fatal(err)
	}
	for i := range p {
		for j := range p[i] {
			if d := math.Abs(float64(p[i][j]) - want[i][j]); d > 1e-6*math.Max(1, math.Abs(want[i][j])) {
				t.Errorf("param[%d][%d] = %v, closed form %v", i, j, p[i][j], want[i][j])
			}
		}
	}
	if o.Steps != 1 {
		t.Errorf("Steps = %d, want 1", o.Steps)
	}
	if o.M[0][1] != float32(0.1*-4.0) {
		t.Errorf("m = %v, want (1-β1)·g = -0.4", o.M[0][1])
	}
}

func TestAdamWMatchesFloat64Reference(t *testing.T) {
	cfg := AdamWConfig{Beta1: 0.8, Beta2: 0.95, Eps: 1e-6, WeightDecay: 0.05}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 64
	p := [][]float32{make([]float32, n)}
	ref := &adamwRef{b1: cfg.Beta1, b2: cfg.Beta2, eps: cfg.Eps, wd: cfg.WeightDecay, m: make([]float64, n), v: make([]float64, n)}
	pr := make([]float64, n)
	for i := range p[0] {
		p[0][i] = float32(rng.NormFloat64())
		pr[i] = float64(p[0][i])
	}
	o, _ := NewAdamW(cfg, []int{n})
	for s := 0; s < 10; s++ {
		g := [][]float32{make([]float32, n)}
		gr := make([]float64, n)
		for i := range g[0] {
			g[0][i] = float32(rng.NormFloat64())
			gr[i] = float64(g[0][i])
		}
		lr := 1e-2 * float64(s+1)
		if err := o.Step(p, g, lr); err != nil {
			t.Fatal(err)
		}
		ref.step(pr, gr, lr)
	}
	for i := range pr {
		if d := math.Abs(float64(p[0][i]) - pr[i]); d > 1e-5 {
			t.Fatalf("after 10 steps param %d = %v, float64 reference %v (|d| %g)", i, p[0][i], pr[i], d)
		}
	}
}

func TestAdamWErrors(t *testing.T) {
	if _, err := NewAdamW(AdamWConfig{Beta1: 1, Beta2: 0.9, Eps: 1e-8}, []int{1}); !errors.Is(err, ErrConfig) {
		t.Errorf("beta1 = 1 accepted: %v", err)
	}
	if _, err := NewAdamW(AdamWConfig{Beta1: 0.9, Beta2: 0.9, Eps: 0}, []int{1}); !errors.Is(err, ErrConfig) {
		t.Errorf("eps = 0 accepted: %v", err)
	}
	o, _ := NewAdamW(DefaultAdamW(), []int{2})
	if err := o.Step([][]float32{{1, 2}}, [][]float32{{1}}, 0.1); !errors.Is(err, ErrShape) {
		t.Errorf("short gradient accepted: %v", err)
	}
	p := [][]float32{{1, 2}}
	if err := o.Step(p, [][]float32{{1, float32(math.NaN())}}, 0.1); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN gradient accepted: %v", err)
	}
	if p[0][0] != 1 || o.Steps != 0 {
		t.Errorf("rejected step changed state: p %v steps %d", p, o.Steps)
	}
	if err := o.Step(p, [][]float32{{1, 1}}, math.NaN()); !errors.Is(err, ErrConfig) {
		t.Errorf("NaN lr accepted: %v", err)
	}
}

func TestClipGradNorm(t *testing.T) {
	g := [][]float32{{3, 0}, {4}} // norm 5
	norm, clipped, err := ClipGradNorm(g, 1)
	if err != nil || !clipped || math.Abs(norm-5) > 1e-12 {
		t.Fatalf("norm %v clipped %v err %v, want 5 true nil", norm, clipped, err)
	}
	if after := GradNorm(g); math.Abs(after-1) > 1e-6 {
		t.Errorf("norm after clipping = %v, want 1", after)
	}
	if r := g[0][0] / g[1][0]; math.Abs(float64(r)-0.75) > 1e-6 {
		t.Errorf("clipping changed the direction: ratio %v", r)
	}
	g = [][]float32{{0.3}, {0.4}}
	if norm, clipped, _ := ClipGradNorm(g, 1); clipped || g[0][0] != 0.3 || math.Abs(norm-0.5) > 1e-7 {
		t.Errorf("small gradient changed: clipped %v g %v", clipped, g)
	}
	g = [][]float32{{30}, {40}}
	if _, clipped, _ := ClipGradNorm(g, 0); clipped || g[0][0] != 30 {
		t.Errorf("maxNorm 0 must disable clipping")
	}
	if _, _, err := ClipGradNorm([][]float32{{float32(math.Inf(1))}}, 1); !errors.Is(err, ErrNonFinite) {
		t.Errorf("infinite gradient: err %v", err)
	}
}
