package trainer

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/lora"
)

// ErrUpdate wraps failures of an update (policy, sink or bookkeeping).
var ErrUpdate = errors.New("trainer: update failed")

// Policy is the training side of an update; *cgo.Model implements it.
type Policy interface {
	Info() cgo.ModelInfo
	LoRA() cgo.LoRAConfig
	Params() []cgo.ParamInfo
	ReadParams() [][]float32
	WriteParams([][]float32) error
	Grads() [][]float32
	ZeroGrads()
	ForwardBackward(batch []cgo.Sequence, obj cgo.Objective, lossScale float32) (cgo.Stats, error)
}

// TensorSink receives the new adapter weights after every update, by
// tensor name ("<W>.lora_a" / "<W>.lora_b", ggml order). *llama.Adapter
// implements it: SetTensor overwrites the loaded adapter's tensors in place,
// so the rollout model sees the new weights without reloading the base model
// and without merging.
type TensorSink interface {
	SetTensor(name string, data []float32) error
}

// UpdateConfig configures an Updater.
type UpdateConfig struct {
	AdamW       AdamWConfig
	Schedule    Schedule
	MaxGradNorm float64       // global L2 clip; ≤ 0 disables
	Objective   cgo.Objective // loss; Aggregation decides the loss scale
	// MicroBatch is the number of sequences per ForwardBackward call
	// (gradient accumulation); ≤ 0 puts the whole mini-batch in one call.
	MicroBatch int
}

// Metrics describes one update. Policy statistics (clip fraction, KL,
// entropy, log-prob) are token-weighted means over the mini-batch's trained
// tokens, from cgo.Stats of each micro-batch.
type Metrics struct {
	Step            int64   // index of this update (0-based), as used by the schedule
	LR              float64 // learning rate used
	Loss            float64 // mini-batch loss (the value differentiated)
	PolicyLoss      float64 // token-mean clipped surrogate
	ClipFrac        float64 // fraction of tokens whose ratio was clipped
	DualClipFrac    float64
	ApproxKL        float64 // k3 estimate of KL(π_old‖π)
	Entropy         float64 // mean per-token entropy (nats)
	LogpMean        float64 // mean log-prob of trained tokens before the step
	GradNorm        float64 // global gradient norm before clipping
	GradClipped     bool    // whether the gradient was clipped
	Tokens          int     // trained tokens in the loss
	Sequences       int     // sequences in the loss
	MaskedSequences int     // sequences dropped by low-probability masking
	MicroBatches    int     // ForwardBackward calls
	Skipped         bool    // no trained token survived masking: no step taken
}

// Updater performs LoRA updates: gradient accumulation over micro-batches,
// global-norm clipping, an AdamW step, writing the parameters back to the
// policy and pushing them to the rollout sinks.
type Updater struct {
	Policy Policy
	Sinks  []TensorSink
	Opt    *AdamW
	Step   int64     // updates done
	RNG    *rand.PCG // the training loop's random source, saved in the state
	Meta   map[string]string

	cfg    UpdateConfig
	infos  []cgo.ParamInfo
	params [][]float32 // current parameters, policy order
}

// NewUpdater makes an Updater over policy with fresh AdamW moments; the
// parameters are read from the policy.
func NewUpdater(p Policy, cfg UpdateConfig) (*Updater, error) {
	if err := cfg.Schedule.Validate(); err != nil {
		return nil, err
	}
	if math.IsNaN(cfg.MaxGradNorm) {
		return nil, fmt.Errorf("%w: max gradient norm is NaN", ErrConfig)
	}
	u := &Updater{Policy: p, cfg: cfg, infos: p.Params(), params: p.ReadParams(), Meta: map[string]string{}}
	if len(u.params) != len(u.infos) {
		return nil, fmt.Errorf("%w: policy has %d params but returned %d tensors", ErrUpdate, len(u.infos), len(u.params))
	}
	sizes := make([]int, len(u.params))
	for i, p := range u.params {
		sizes[i] = len(p)
		if len(p) != u.infos[i].Shape[0]*u.infos[i].Shape[1] {
			return nil, fmt.Errorf("%w: %s has %d values, shape %v", ErrUpdate, u.infos[i].Name, len(p), u.infos[i].Shape)
		}
	}
	opt, err := NewAdamW(cfg.AdamW, sizes)
	if err != nil {
		return nil, err
	}
	u.Opt = opt
	return u, nil
}

// Config returns the updater's configuration.
func (u *Updater) Config() UpdateConfig { return u.cfg }

// Params returns the current parameters in policy order (aliasing the
// updater's copy; do not modify).
func (u *Updater) Params() [][]float32 { return u.params }

// Update performs one optimizer step on the mini-batch. The loss scale of
// every micro-batch is 1/N for the whole mini-batch's N (trained tokens for
// token-mean, sequences for seq-mean-token-mean, counted after
// low-probability masking by cgo.CountTrained), so the accumulated gradient
// is the gradient of the mini-batch mean however it is split. When no
// trained token survives, no step is taken (Metrics.Skipped).
func (u *Updater) Update(batch []cgo.Sequence) (Metrics, error) {
	m := Metrics{Step: u.Step, LR: u.cfg.Schedule.LR(u.Step)}
	tokens, seqs := cgo.CountTrained(batch, u.cfg.Objective)
	if tokens == 0 {
		m.Skipped = true
		return m, nil
	}
	n := tokens
	if u.cfg.Objective.Aggregation == cgo.AggSeqMeanTokenMean {
		n = seqs
	}
	scale := float32(1 / float64(n))
	mb := u.cfg.MicroBatch
	if mb <= 0 || mb > len(batch) {
		mb = len(batch)
	}
	u.Policy.ZeroGrads()
	var wsum float64
	for lo := 0; lo < len(batch); lo += mb {
		chunk := batch[lo:min(lo+mb, len(batch))]
		if t, _ := cgo.CountTrained(chunk, u.cfg.Objective); t == 0 {
			m.MaskedSequences += countMasked(chunk, u.cfg.Objective)
			continue
		}
		st, err := u.Policy.ForwardBackward(chunk, u.cfg.Objective, scale)
		if err != nil {
			return m, fmt.Errorf("%w: micro-batch at %d: %w", ErrUpdate, lo, err)
		}
		w := float64(st.Tokens)
		m.Loss += st.Loss
		m.PolicyLoss += w * st.PolicyLoss
		m.ClipFrac += w * st.ClipFrac
		m.DualClipFrac += w * st.DualClipFrac
		m.ApproxKL += w * st.ApproxKL
		m.Entropy += w * st.Entropy
		m.LogpMean += w * st.LogpMean
		m.Tokens += st.Tokens
		m.Sequences += st.Sequences
		m.MaskedSequences += st.MaskedSequences
		m.MicroBatches++
		wsum += w
	}
	if wsum > 0 {
		m.PolicyLoss /= wsum
		m.ClipFrac /= wsum
		m.DualClipFrac /= wsum
		m.ApproxKL /= wsum
		m.Entropy /= wsum
		m.LogpMean /= wsum
	}
	grads := u.Policy.Grads()
	if len(grads) != len(u.params) {
		return m, fmt.Errorf("%w: policy returned %d gradients for %d params", ErrUpdate, len(grads), len(u.params))
	}
	norm, clipped, err := ClipGradNorm(grads, u.cfg.MaxGradNorm)
	m.GradNorm, m.GradClipped = norm, clipped
	if err != nil {
		return m, err
	}
	// Step a copy so that a failure leaves params, moments and policy as they were.
	next := make([][]float32, len(u.params))
	for i, p := range u.params {
		next[i] = append([]float32(nil), p...)
	}
	saved := u.snapshotMoments()
	if err := u.Opt.Step(next, grads, m.LR); err != nil {
		return m, err
	}
	if err := u.Policy.WriteParams(next); err != nil {
		u.restoreMoments(saved)
		return m, fmt.Errorf("%w: writing parameters: %w", ErrUpdate, err)
	}
	u.params = next
	u.Step++
	if err := u.Push(); err != nil {
		return m, err
	}
	return m, nil
}

func countMasked(chunk []cgo.Sequence, obj cgo.Objective) int {
	n := 0
	for i := range chunk {
		if t, _ := cgo.CountTrained(chunk[i:i+1], obj); t == 0 {
			for _, tr := range chunk[i].Trained {
				if tr {
					n++
					break
				}
			}
		}
	}
	return n
}

type momentSnapshot struct {
	m, v  [][]float32
	steps int64
}

func (u *Updater) snapshotMoments() momentSnapshot {
	s := momentSnapshot{steps: u.Opt.Steps, m: make([][]float32, len(u.Opt.M)), v: make([][]float32, len(u.Opt.V))}
	for i := range u.Opt.M {
		s.m[i] = append([]float32(nil), u.Opt.M[i]...)
		s.v[i] = append([]float32(nil), u.Opt.V[i]...)
	}
	return s
}

func (u *Updater) restoreMoments(s momentSnapshot) {
	u.Opt.M, u.Opt.V, u.Opt.Steps = s.m, s.v, s.steps
}

// Push sends the current parameters to every sink (by tensor name).
func (u *Updater) Push() error {
	for _, s := range u.Sinks {
		for i, info := range u.infos {
			if err := s.SetTensor(info.Name, u.params[i]); err != nil {
				return fmt.Errorf("%w: pushing %s to the rollout model: %w", ErrUpdate, info.Name, err)
			}
		}
	}
	return nil
}

// Adapter returns the current parameters as a llama.cpp adapter (a copy).
func (u *Updater) Adapter() (*lora.Adapter, error) {
	return AdapterFromParams(u.Policy.Info().Arch, u.Policy.LoRA().Alpha, u.infos, u.params)
}

// AdapterFromParams builds an adapter from tensors laid out as described by
// infos (cgo.ParamInfo: "<W>.lora_a" ne [in, r], "<W>.lora_b" ne [r, out]).
// The data is copied.
func AdapterFromParams(arch string, alpha float32, infos []cgo.ParamInfo, data [][]float32) (*lora.Adapter, error) {
	if len(infos) != len(data) {
		return nil, fmt.Errorf("%w: %d param infos, %d tensors", ErrShape, len(infos), len(data))
	}
	a := &lora.Adapter{Arch: arch, Alpha: alpha, Meta: map[string]string{}}
	pairs := map[string]*lora.Pair{}
	for i, info := range infos {
		base, isB, ok := lora.SplitName(info.Name)
		if !ok {
			return nil, fmt.Errorf("%w: parameter %q is not a LoRA tensor", ErrShape, info.Name)
		}
		if len(data[i]) != info.Shape[0]*info.Shape[1] {
			return nil, fmt.Errorf("%w: %s has %d values, shape %v", ErrShape, info.Name, len(data[i]), info.Shape)
		}
		p := pairs[base]
		if p == nil {
			p = &lora.Pair{Base: base}
			pairs[base] = p
			a.Pairs = append(a.Pairs, p)
		}
		vals := append([]float32(nil), data[i]...)
		if isB {
			p.Rank, p.Out, p.B = info.Shape[0], info.Shape[1], vals
		} else {
			p.In, p.A = info.Shape[0], vals
			if p.Rank == 0 {
				p.Rank = info.Shape[1]
			} else if p.Rank != info.Shape[1] {
				return nil, fmt.Errorf("%w: %s: rank of lora_a %d, lora_b %d", ErrShape, base, info.Shape[1], p.Rank)
			}
		}
	}
	a.Sort()
	if err := a.Check(); err != nil {
		return nil, err
	}
	return a, nil
}

// paramsFromAdapter lays the adapter's tensors out in infos order, checking
// that the adapter has exactly these tensors with these shapes.
func paramsFromAdapter(a *lora.Adapter, infos []cgo.ParamInfo) ([][]float32, error) {
	out := make([][]float32, len(infos))
	for i, info := range infos {
		base, isB, _ := lora.SplitName(info.Name)
		p := a.Pair(base)
		if p == nil {
			return nil, fmt.Errorf("%w: adapter has no pair for %s (the policy's targets differ)", lora.ErrMismatch, base)
		}
		want := [2]int{p.In, p.Rank}
		src := p.A
		if isB {
			want, src = [2]int{p.Rank, p.Out}, p.B
		}
		if want != info.Shape {
			return nil, fmt.Errorf("%w: %s: adapter shape %v, policy %v (rank or base model differ)", lora.ErrMismatch, info.Name, want, info.Shape)
		}
		out[i] = append([]float32(nil), src...)
	}
	if 2*len(a.Pairs) != len(infos) {
		return nil, fmt.Errorf("%w: adapter has %d pairs, the policy trains %d", lora.ErrMismatch, len(a.Pairs), len(infos)/2)
	}
	return out, nil
}

// LoadAdapter replaces the policy's parameters with the adapter's (for
// example one written by `empo2 lora init`) and pushes them to the sinks.
// Alpha and architecture must match the policy's.
func (u *Updater) LoadAdapter(a *lora.Adapter) error {
	if err := u.checkAdapter(a); err != nil {
		return err
	}
	p, err := paramsFromAdapter(a, u.infos)
	if err != nil {
		return err
	}
	if err := u.Policy.WriteParams(p); err != nil {
		return fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	u.params = p
	return u.Push()
}

func (u *Updater) checkAdapter(a *lora.Adapter) error {
	if arch := u.Policy.Info().Arch; a.Arch != arch {
		return fmt.Errorf("%w: adapter architecture %q, policy %q", lora.ErrMismatch, a.Arch, arch)
	}
	if alpha := u.Policy.LoRA().Alpha; a.Alpha != alpha {
		return fmt.Errorf("%w: adapter alpha %v, policy %v", lora.ErrMismatch, a.Alpha, alpha)
	}
	return nil
}

// State returns the full training state (a deep copy).
func (u *Updater) State() (*State, error) {
	a, err := u.Adapter()
	if err != nil {
		return nil, err
	}
	refs := ParamOrder(a)
	idx := map[string]int{}
	for i, info := range u.infos {
		idx[info.Name] = i
	}
	opt := &AdamW{Config: u.Opt.Config, Steps: u.Opt.Steps, M: make([][]float32, len(refs)), V: make([][]float32, len(refs))}
	for j, r := range refs {
		i := idx[r.Name()]
		opt.M[j] = append([]float32(nil), u.Opt.M[i]...)
		opt.V[j] = append([]float32(nil), u.Opt.V[i]...)
	}
	meta := map[string]string{}
	for k, v := range u.Meta {
		meta[k] = v
	}
	return &State{Adapter: a, Opt: opt, Step: u.Step, Schedule: u.cfg.Schedule, RNG: clonePCG(u.RNG), Meta: meta}, nil
}

// clonePCG returns an independent copy of r (nil for nil); a PCG's state is
// its two words.
func clonePCG(r *rand.PCG) *rand.PCG {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// Save writes the training state to path atomically.
func (u *Updater) Save(path string) error {
	s, err := u.State()
	if err != nil {
		return err
	}
	return Save(path, s)
}

// Restore loads a state into the updater: parameters (written to the policy
// and pushed to the sinks), moments, step, schedule, AdamW settings and RNG.
// The state must come from a policy with the same targets, rank, alpha and
// base shapes.
func (u *Updater) Restore(s *State) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := u.checkAdapter(s.Adapter); err != nil {
		return err
	}
	params, err := paramsFromAdapter(s.Adapter, u.infos)
	if err != nil {
		return err
	}
	refs := ParamOrder(s.Adapter)
	pos := map[string]int{}
	for j, r := range refs {
		pos[r.Name()] = j
	}
	opt := &AdamW{Config: s.Opt.Config, Steps: s.Opt.Steps, M: make([][]float32, len(u.infos)), V: make([][]float32, len(u.infos))}
	for i, info := range u.infos {
		j := pos[info.Name]
		opt.M[i] = append([]float32(nil), s.Opt.M[j]...)
		opt.V[i] = append([]float32(nil), s.Opt.V[j]...)
	}
	if err := u.Policy.WriteParams(params); err != nil {
		return fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	u.params, u.Opt, u.Step = params, opt, s.Step
	u.cfg.Schedule, u.cfg.AdamW = s.Schedule, s.Opt.Config
	u.RNG = clonePCG(s.RNG)
	u.Meta = map[string]string{}
	for k, v := range s.Meta {
		u.Meta[k] = v
	}
	return u.Push()
}
