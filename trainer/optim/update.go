package optim

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/internal/stats"
	"github.com/empo2/empo2/lora"
)

// ErrUpdate wraps failures of an update (policy, sink or bookkeeping).
var ErrUpdate = errors.New("trainer: update failed")

// Policy is the training side of an update; *cgo.Model implements it.
// Params() must be in the canonical order (lora.Less, A before B): the
// updater's adapter, the optimizer's moments and the policy's tensors then
// line up index by index.
type Policy interface {
	Info() cgo.ModelInfo
	LoRA() cgo.LoRAConfig
	Params() []cgo.ParamInfo
	ReadParams() ([][]float32, error)
	WriteParams([][]float32) error
	Grads() ([][]float32, error)
	ZeroGrads() error
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

// BackendOptimizer is a Policy whose AdamW step runs where its parameters
// live (*cgo.Model: GGML_OP_OPT_STEP_ADAMW on the training backend, moments
// resident beside the parameters, gradient norm and clipping there too). The
// Updater uses it whenever the policy is one; the Go AdamW (optim.go) is
// the reference and the optimizer of other policies.
type BackendOptimizer interface {
	AdamWStep(p cgo.AdamWParams) (gradNorm float64, clipped bool, err error)
	Moments() (m, v [][]float32, err error)
	SetMoments(m, v [][]float32) error
}

// AdapterSink is a TensorSink that takes a whole adapter at once, atomically
// with respect to its readers (*llama.Adapter: SetTensors replaces every
// tensor under one write lock, so no generation sees half an update).
// Push prefers it.
type AdapterSink interface {
	SetTensors(a *lora.Adapter) error
}

// Config configures an Updater (and a FullUpdater).
type Config struct {
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
	Step         int64   // index of this update (0-based), as used by the schedule
	LR           float64 // learning rate used
	Loss         float64 // mini-batch loss (the value differentiated)
	PolicyLoss   float64 // token-mean clipped surrogate
	ClipFrac     float64 // fraction of tokens whose ratio was clipped
	DualClipFrac float64
	ApproxKL     float64 // k3 estimate of KL(π_old‖π)
	Entropy      float64 // mean per-token entropy (nats)
	LogpMean     float64 // mean log-prob of trained tokens before the step
	GradNorm     float64 // global gradient norm before clipping
	GradClipped  bool    // whether the gradient was clipped
	Tokens       int     // trained tokens in the loss
	Sequences    int     // sequences in the loss
	MicroBatches int     // ForwardBackward calls
	Skipped      bool    // no trained token in the mini-batch: no step taken

	// LossScaleSkips: graphs recomputed at a lower loss scale after an
	// overflow of the engine's scaled backward (cgo.Stats.LossScaleSkips)
	LossScaleSkips int
}

// Updater performs LoRA updates: gradient accumulation over micro-batches,
// global-norm clipping, an AdamW step, writing the parameters back to the
// policy and pushing them to the rollout sinks.
type Updater struct {
	Policy Policy
	Sinks  []TensorSink
	// Opt holds the AdamW configuration and step count t; its moments M, V
	// are host memory only with the Go optimizer. With a BackendOptimizer
	// they stay nil: the moments live on the backend (State reads them).
	Opt  *AdamW
	Step int64     // updates done
	RNG  *rand.PCG // the training loop's random source, saved in the state
	Meta map[string]string

	cfg      Config
	progress float64         // SetProgress; < 0: the schedule by update index
	infos    []cgo.ParamInfo // = adapter.Params() = Policy.Params(), canonical order
	adapter  *lora.Adapter   // current parameters (the one representation)
}

// NewUpdater makes an Updater over policy with fresh AdamW moments; the
// parameters are read from the policy.
func NewUpdater(p Policy, cfg Config) (*Updater, error) {
	if err := cfg.Schedule.Validate(); err != nil {
		return nil, err
	}
	if math.IsNaN(cfg.MaxGradNorm) {
		return nil, fmt.Errorf("%w: max gradient norm is NaN", ErrConfig)
	}
	vals, err := p.ReadParams()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the policy's parameters: %w", ErrUpdate, err)
	}
	infos := p.Params()
	a, err := lora.FromParams(p.Info().Arch, p.LoRA().Alpha, infos, vals)
	if err != nil {
		return nil, fmt.Errorf("%w: the policy's parameters: %w", ErrUpdate, err)
	}
	u := &Updater{Policy: p, cfg: cfg, progress: -1, infos: infos, adapter: a, Meta: map[string]string{}}
	sizes := make([]int, len(vals))
	for i, v := range vals {
		sizes[i] = len(v)
	}
	opt, err := NewAdamW(cfg.AdamW, sizes)
	if err != nil {
		return nil, err
	}
	u.Opt = opt
	if bo := u.backend(); bo != nil {
		if err := bo.SetMoments(nil, nil); err != nil { // fresh moments on the backend
			return nil, fmt.Errorf("%w: %w", ErrUpdate, err)
		}
		u.Opt.M, u.Opt.V = nil, nil
	}
	return u, nil
}

// backend returns the policy as a BackendOptimizer, or nil when AdamW runs in Go.
func (u *Updater) backend() BackendOptimizer {
	bo, _ := u.Policy.(BackendOptimizer)
	return bo
}

// Config returns the updater's configuration.
func (u *Updater) Config() Config { return u.cfg }

// Params returns the current parameters in the policy's (canonical) order,
// aliasing the updater's adapter; do not modify.
func (u *Updater) Params() [][]float32 { return u.adapter.Tensors() }

// SetProgress makes the next updates take their learning rate at progress
// p ∈ [0,1] of the run (Schedule.LRAt) instead of from their index alone;
// p < 0 goes back to Schedule.LR(Step).
func (u *Updater) SetProgress(p float64) { u.progress = p }

// lr is the learning rate of the next update.
func (u *Updater) lr() float64 {
	if u.progress >= 0 {
		return u.cfg.Schedule.LRAt(u.Step, u.progress)
	}
	return u.cfg.Schedule.LR(u.Step)
}

// Update performs one optimizer step on the mini-batch: the gradient of the
// mini-batch mean loss, accumulated over micro-batches (accumulate), then
// clipping and AdamW. When no trained token survives, no step is taken
// (Metrics.Skipped).
func (u *Updater) Update(batch []cgo.Sequence) (Metrics, error) {
	m, err := accumulate(u.Policy, u.cfg, u.Step, u.lr(), batch)
	if err != nil || m.Skipped {
		return m, err
	}
	if bo := u.backend(); bo != nil {
		if err := u.backendStep(bo, &m); err != nil {
			return m, err
		}
		return m, u.Push()
	}
	grads, err := u.Policy.Grads()
	if err != nil {
		return m, fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	if len(grads) != len(u.infos) {
		return m, fmt.Errorf("%w: policy returned %d gradients for %d params", ErrUpdate, len(grads), len(u.infos))
	}
	norm, clipped, err := ClipGradNorm(grads, u.cfg.MaxGradNorm)
	m.GradNorm, m.GradClipped = norm, clipped
	if err != nil {
		return m, err
	}
	// Step a copy so that a failure leaves params, moments and policy as they were.
	next := u.adapter.Clone()
	saved := u.snapshotMoments()
	if err := u.Opt.Step(next.Tensors(), grads, m.LR); err != nil {
		return m, err
	}
	if err := u.Policy.WriteParams(next.Tensors()); err != nil {
		u.restoreMoments(saved)
		return m, fmt.Errorf("%w: writing parameters: %w", ErrUpdate, err)
	}
	u.adapter = next
	u.Step++
	if err := u.Push(); err != nil {
		return m, err
	}
	return m, nil
}

// backendStep: clipping and AdamW on the policy's backend, then the new
// parameters are read back into the updater's adapter (for pushing and
// saving). A non-finite gradient norm changes nothing.
func (u *Updater) backendStep(bo BackendOptimizer, m *Metrics) error {
	if err := backendAdamW(bo, u.Opt.Config, u.Opt.Steps+1, u.cfg.MaxGradNorm, m); err != nil {
		return err
	}
	u.Opt.Steps++
	u.Step++
	vals, err := u.Policy.ReadParams()
	if err != nil {
		return fmt.Errorf("%w: reading the parameters after the step: %w", ErrUpdate, err)
	}
	next := u.adapter.Clone()
	for i, t := range next.Tensors() {
		copy(t, vals[i])
	}
	u.adapter = next
	return nil
}

// gradAccumulator is the gradient side of a Policy or a FullPolicy.
type gradAccumulator interface {
	ZeroGrads() error
	ForwardBackward(batch []cgo.Sequence, obj cgo.Objective, lossScale float32) (cgo.Stats, error)
}

// accumulate is the gradient accumulation of Updater.Update and
// FullUpdater.Update: it zeroes p's gradients and accumulates the gradient
// of the mini-batch loss over micro-batches of cfg.MicroBatch sequences
// (≤ 0: one call). The loss scale of every micro-batch is 1/N for the whole
// mini-batch's N (trained tokens for token-mean, sequences for
// seq-mean-token-mean, counted by cgo.CountTrained), so the accumulated
// gradient is the gradient of the mini-batch mean however it is split; a
// micro-batch without trained tokens is not run. The returned Metrics carry step, its learning rate lr
// and the statistics of the pass (Loss: the sum of the
// micro-batches' scaled losses, i.e. the mini-batch loss; policy
// statistics: token-weighted means); GradNorm and GradClipped are left to
// the caller's optimizer step. When the batch has no trained token, nothing is
// run, not even ZeroGrads, and Metrics.Skipped is set.
func accumulate(p gradAccumulator, cfg Config, step int64, lr float64, batch []cgo.Sequence) (Metrics, error) {
	m := Metrics{Step: step, LR: lr}
	obj := cfg.Objective
	tokens, seqs := cgo.CountTrained(batch)
	if tokens == 0 {
		m.Skipped = true
		return m, nil
	}
	n := tokens
	if obj.Aggregation == cgo.AggSeqMeanTokenMean {
		n = seqs
	}
	scale := float32(1 / float64(n))
	mb := cfg.MicroBatch
	if mb <= 0 || mb > len(batch) {
		mb = len(batch)
	}
	if err := p.ZeroGrads(); err != nil {
		return m, fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	var policyLoss, clip, dualClip, kl, entropy, logp stats.Mean // token-weighted
	for lo := 0; lo < len(batch); lo += mb {
		chunk := batch[lo:min(lo+mb, len(batch))]
		if t, _ := cgo.CountTrained(chunk); t == 0 {
			continue
		}
		st, err := p.ForwardBackward(chunk, obj, scale)
		if err != nil {
			return m, fmt.Errorf("%w: micro-batch at %d: %w", ErrUpdate, lo, err)
		}
		w := float64(st.Tokens)
		m.Loss += st.Loss
		policyLoss.Add(st.PolicyLoss, w)
		clip.Add(st.ClipFrac, w)
		dualClip.Add(st.DualClipFrac, w)
		kl.Add(st.ApproxKL, w)
		entropy.Add(st.Entropy, w)
		logp.Add(st.LogpMean, w)
		m.Tokens += st.Tokens
		m.Sequences += st.Sequences
		m.MicroBatches++
		m.LossScaleSkips += st.LossScaleSkips
	}
	m.PolicyLoss, m.ClipFrac, m.DualClipFrac = policyLoss.Value(), clip.Value(), dualClip.Value()
	m.ApproxKL, m.Entropy, m.LogpMean = kl.Value(), entropy.Value(), logp.Value()
	return m, nil
}

// backendAdamW takes AdamW step t (1-based: the bias corrections' t) with
// learning rate m.LR on bo's backend, clipping the global gradient norm to
// maxNorm (≤ 0: no clipping) first, and records the norm in m. A
// non-finite gradient norm returns ErrNonFinite and changes nothing.
func backendAdamW(bo BackendOptimizer, c AdamWConfig, t int64, maxNorm float64, m *Metrics) error {
	norm, clipped, err := bo.AdamWStep(cgo.AdamWParams{
		LR: m.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay,
		Step: t, MaxGradNorm: maxNorm,
	})
	m.GradNorm, m.GradClipped = norm, clipped
	if err != nil {
		if errors.Is(err, cgo.ErrNonFinite) {
			return fmt.Errorf("%w: %w", ErrNonFinite, err)
		}
		return fmt.Errorf("%w: AdamW step: %w", ErrUpdate, err)
	}
	return nil
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

// Push sends the current parameters to every sink: at once to an
// AdapterSink, else tensor by tensor (by name).
func (u *Updater) Push() error {
	for _, s := range u.Sinks {
		if as, ok := s.(AdapterSink); ok {
			if err := as.SetTensors(u.adapter); err != nil {
				return fmt.Errorf("%w: pushing the adapter to the rollout model: %w", ErrUpdate, err)
			}
			continue
		}
		for i, t := range u.adapter.Tensors() {
			if err := s.SetTensor(u.infos[i].Name, t); err != nil {
				return fmt.Errorf("%w: pushing %s to the rollout model: %w", ErrUpdate, u.infos[i].Name, err)
			}
		}
	}
	return nil
}

// Adapter returns the current parameters as a llama.cpp adapter (a copy).
func (u *Updater) Adapter() (*lora.Adapter, error) {
	return u.adapter.Clone(), nil
}

// LoadAdapter replaces the policy's parameters with the adapter's (for
// example one written by `empo2 lora init`) and pushes them to the sinks.
// Alpha, architecture, targets, rank and base shapes must match the policy's.
func (u *Updater) LoadAdapter(a *lora.Adapter) error {
	if err := u.checkAdapter(a); err != nil {
		return err
	}
	c := a.Clone()
	if err := u.Policy.WriteParams(c.Tensors()); err != nil {
		return fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	u.adapter = c
	return u.Push()
}

// checkAdapter: same architecture, alpha and tensors (names and shapes, in
// the same canonical order) as the policy.
func (u *Updater) checkAdapter(a *lora.Adapter) error {
	if a == nil {
		return fmt.Errorf("%w: nil adapter", lora.ErrMismatch)
	}
	if arch := u.Policy.Info().Arch; a.Arch != arch {
		return fmt.Errorf("%w: adapter architecture %q, policy %q", lora.ErrMismatch, a.Arch, arch)
	}
	// shapes before alpha: another rank or base model is the real mismatch
	// (its alpha, 2·rank by default, differs too)
	if r, pr := a.Rank(), u.Policy.LoRA().Rank; r != pr {
		return fmt.Errorf("%w: the adapter has rank %d, the policy rank %d", lora.ErrMismatch, r, pr)
	}
	if err := lora.SameLayout(a.Params(), u.infos); err != nil {
		return fmt.Errorf("the adapter does not fit the policy's base model or targets: %w", err)
	}
	if alpha := u.Policy.LoRA().Alpha; a.Alpha != alpha {
		return fmt.Errorf("%w: adapter alpha %v, policy %v", lora.ErrMismatch, a.Alpha, alpha)
	}
	return nil
}

// State returns the full training state (a deep copy; with a
// BackendOptimizer the moments are read from the backend).
func (u *Updater) State() (*State, error) {
	opt := &AdamW{Config: u.Opt.Config, Steps: u.Opt.Steps, M: clone2(u.Opt.M), V: clone2(u.Opt.V)}
	if bo := u.backend(); bo != nil {
		var err error
		if opt.M, opt.V, err = bo.Moments(); err != nil {
			return nil, fmt.Errorf("%w: reading the moments: %w", ErrUpdate, err)
		}
	}
	meta := map[string]string{}
	for k, v := range u.Meta {
		meta[k] = v
	}
	return &State{Adapter: u.adapter.Clone(), Opt: opt, Step: u.Step, Schedule: u.cfg.Schedule, RNG: clonePCG(u.RNG), Meta: meta}, nil
}

func clone2(x [][]float32) [][]float32 {
	out := make([][]float32, len(x))
	for i, v := range x {
		out[i] = append([]float32(nil), v...)
	}
	return out
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

// Updates is the number of optimizer steps taken.
func (u *Updater) Updates() int64 { return u.Step }

// SaveWithMeta copies meta into the updater's Meta and writes the training
// state to path (Save).
func (u *Updater) SaveWithMeta(path string, meta map[string]string) error {
	maps.Copy(u.Meta, meta)
	return u.Save(path)
}

// RestoreChecked reads the state at path (Load), calls check with its Meta
// and only then restores it (Restore); it returns the Meta. Nothing changes
// when reading or check fails.
func (u *Updater) RestoreChecked(path string, check func(meta map[string]string) error) (map[string]string, error) {
	return restoreChecked(path, Load, func(s *State) map[string]string { return s.Meta }, check, u.Restore)
}

// restoreChecked is RestoreChecked for either kind of state S: it reads
// the state at path with load, calls check with its Meta (meta reads it)
// and only then applies it with restore; it returns the Meta. Nothing is
// changed when load or check fails.
func restoreChecked[S any](path string, load func(string) (S, error), meta func(S) map[string]string,
	check func(map[string]string) error, restore func(S) error) (map[string]string, error) {
	st, err := load(path)
	if err != nil {
		return nil, err
	}
	m := meta(st)
	if err := check(m); err != nil {
		return nil, err
	}
	if err := restore(st); err != nil {
		return nil, err
	}
	return m, nil
}

// Restore loads a state into the updater: parameters (written to the policy
// and pushed to the sinks), moments, step, schedule, AdamW settings and RNG.
// The state must come from a policy with the same targets, rank, alpha and
// base shapes (its tensors and moments are then in the policy's order).
func (u *Updater) Restore(s *State) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := u.checkAdapter(s.Adapter); err != nil {
		return err
	}
	a := s.Adapter.Clone()
	opt := &AdamW{Config: s.Opt.Config, Steps: s.Opt.Steps, M: clone2(s.Opt.M), V: clone2(s.Opt.V)}
	if err := u.Policy.WriteParams(a.Tensors()); err != nil {
		return fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	if bo := u.backend(); bo != nil {
		if err := bo.SetMoments(opt.M, opt.V); err != nil {
			return fmt.Errorf("%w: %w", ErrUpdate, err)
		}
		opt.M, opt.V = nil, nil
	}
	u.adapter, u.Opt, u.Step = a, opt, s.Step
	u.cfg.Schedule, u.cfg.AdamW = s.Schedule, s.Opt.Config
	u.RNG = clonePCG(s.RNG)
	u.Meta = map[string]string{}
	for k, v := range s.Meta {
		u.Meta[k] = v
	}
	return u.Push()
}
