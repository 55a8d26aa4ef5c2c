package optim

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Errors returned by the optimizer. Callers match them with errors.Is.
var (
	// ErrShape means params, grads or moments disagree in count or length.
	ErrShape = errors.New("trainer: parameter/gradient shape mismatch")
	// ErrConfig means an optimizer or schedule hyper-parameter is out of range.
	ErrConfig = errors.New("trainer: invalid optimizer configuration")
	// ErrNonFinite means a gradient or its norm is NaN or infinite.
	ErrNonFinite = errors.New("trainer: non-finite gradient")
)

// AdamWConfig holds the hyper-parameters of AdamW.
//
// Reference: I. Loshchilov, F. Hutter, "Decoupled Weight Decay
// Regularization", ICLR 2019, Algorithm 2 (AdamW). Following PyTorch's
// torch.optim.AdamW, the decay term is scaled by the learning rate:
// θ ← θ − lr·λ·θ, i.e. the paper's schedule multiplier η_t is folded into lr
// and its λ corresponds to lr·WeightDecay here.
type AdamWConfig struct {
	Beta1       float64 // first-moment decay β1, in [0,1)
	Beta2       float64 // second-moment decay β2, in [0,1)
	Eps         float64 // ε added to √v̂, > 0
	WeightDecay float64 // decoupled decay λ, ≥ 0
}

// DefaultAdamW returns PyTorch's AdamW defaults except weight decay 0, the
// usual choice for LoRA (β1 0.9, β2 0.999, ε 1e-8).
func DefaultAdamW() AdamWConfig {
	return AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0}
}

// Validate reports ErrConfig for out-of-range hyper-parameters.
func (c AdamWConfig) Validate() error {
	bad := func(name string, v float64) error {
		return fmt.Errorf("%w: %s = %v", ErrConfig, name, v)
	}
	switch {
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return bad("beta1", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return bad("beta2", c.Beta2)
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		return bad("eps", c.Eps)
	case !(c.WeightDecay >= 0) || math.IsInf(c.WeightDecay, 0):
		return bad("weight decay", c.WeightDecay)
	}
	return nil
}

// AdamW is the optimizer state: first and second moments per parameter
// tensor and the number of steps taken. Moments are kept in float32 (the
// precision they are saved in, so that resuming is bit-exact); each element's
// update is computed in float64.
type AdamW struct {
	Config AdamWConfig
	M, V   [][]float32
	Steps  int64 // number of completed steps t
}

// NewAdamW makes zeroed moments for tensors of the given element counts.
func NewAdamW(cfg AdamWConfig, sizes []int) (*AdamW, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := &AdamW{Config: cfg, M: make([][]float32, len(sizes)), V: make([][]float32, len(sizes))}
	for i, n := range sizes {
		if n < 0 {
			return nil, fmt.Errorf("%w: tensor %d has negative size %d", ErrShape, i, n)
		}
		o.M[i] = make([]float32, n)
		o.V[i] = make([]float32, n)
	}
	return o, nil
}

// Sizes returns the element count of every tensor the optimizer tracks.
func (o *AdamW) Sizes() []int {
	s := make([]int, len(o.M))
	for i := range o.M {
		s[i] = len(o.M[i])
	}
	return s
}

func (o *AdamW) check(params, grads [][]float32) error {
	if len(params) != len(o.M) || len(grads) != len(o.M) || len(o.V) != len(o.M) {
		return fmt.Errorf("%w: optimizer has %d tensors, got %d params and %d grads",
			ErrShape, len(o.M), len(params), len(grads))
	}
	for i := range o.M {
		n := len(o.M[i])
		if len(params[i]) != n || len(grads[i]) != n || len(o.V[i]) != n {
			return fmt.Errorf("%w: tensor %d: moments %d, param %d, grad %d elements",
				ErrShape, i, n, len(params[i]), len(grads[i]))
		}
	}
	return nil
}

// Step applies one AdamW update in place to params with learning rate lr:
//
//	t ← t+1
//	θ ← θ − lr·λ·θ                       (decoupled weight decay)
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g²
//	m̂ = m/(1−β1^t),  v̂ = v/(1−β2^t)     (bias correction)
//	θ ← θ − lr·m̂/(√v̂ + ε)
//
// (Loshchilov & Hutter 2019, Algorithm 2; Kingma & Ba 2015 for the moments
// and bias correction.) Grads are read only. Non-finite gradients are
// rejected before anything changes.
func (o *AdamW) Step(params, grads [][]float32, lr float64) error {
	if err := o.check(params, grads); err != nil {
		return err
	}
	if !(lr >= 0) || math.IsInf(lr, 0) {
		return fmt.Errorf("%w: learning rate %v", ErrConfig, lr)
	}
	for i := range grads {
		for j, g := range grads[i] {
			if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
				return fmt.Errorf("%w: tensor %d element %d is %v", ErrNonFinite, i, j, g)
			}
		}
	}
	o.Steps++
	c := o.Config
	t := float64(o.Steps)
	// PyTorch's arrangement of the same formula: step size lr/(1−β1^t) and
	// denominator √v/√(1−β2^t) + ε.
	stepSize := lr / (1 - math.Pow(c.Beta1, t))
	sqrtBC2 := math.Sqrt(1 - math.Pow(c.Beta2, t))
	decay := 1 - lr*c.WeightDecay
	b1, b2 := c.Beta1, c.Beta2
	ob1, ob2, eps := 1-b1, 1-b2, c.Eps
	parallelTensors(len(params), func(i int) {
		p, g, m, v := params[i], grads[i], o.M[i], o.V[i]
		g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
		for j := range p {
			gj := float64(g[j])
			mj := b1*float64(m[j]) + ob1*gj
			vj := b2*float64(v[j]) + ob2*gj*gj
			m[j], v[j] = float32(mj), float32(vj)
			p[j] = float32(float64(p[j])*decay - stepSize*mj/(math.Sqrt(vj)/sqrtBC2+eps))
		}
	})
	return nil
}

// parallelTensors runs f(0..n-1) on up to GOMAXPROCS goroutines. Each
// tensor is processed by one goroutine, so results do not depend on the
// split.
func parallelTensors(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// GradNorm returns the global L2 norm √(Σ g²) over all tensors, accumulated
// in float64.
func GradNorm(grads [][]float32) float64 {
	var s float64
	for _, g := range grads {
		for _, x := range g {
			s += float64(x) * float64(x)
		}
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales grads in place so that their global L2 norm is at most
// maxNorm, as torch.nn.utils.clip_grad_norm_ does (coefficient
// maxNorm/(norm+1e-6), applied only when it is below 1; Pascanu, Mikolov &
// Bengio 2013, "On the difficulty of training recurrent neural networks").
// It returns the norm before clipping and whether clipping happened.
// maxNorm ≤ 0 disables clipping. A non-finite norm is an ErrNonFinite.
func ClipGradNorm(grads [][]float32, maxNorm float64) (norm float64, clipped bool, err error) {
	norm = GradNorm(grads)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, false, fmt.Errorf("%w: gradient norm %v", ErrNonFinite, norm)
	}
	if maxNorm <= 0 {
		return norm, false, nil
	}
	coef := maxNorm / (norm + 1e-6)
	if coef >= 1 {
		return norm, false, nil
	}
	for _, g := range grads {
		for j := range g {
			g[j] = float32(float64(g[j]) * coef)
		}
	}
	return norm, true, nil
}
