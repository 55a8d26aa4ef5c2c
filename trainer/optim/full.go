package optim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/statefile"
)

// Full SFT (`empo2 sft --full`): every weight of a small F32 model is
// trained (cgo.LoadFull), with the same objective, batching, schedule,
// AdamW on the backend and clipping as LoRA SFT. FullUpdater is the
// Updater of that mode: it has no adapter, pushes nothing to rollout
// models, and writes its own checkpoint (FullState). The trained model is
// written as a new base GGUF by cgo.Model.SaveFull.

// FullPolicy is a model trained in full (*cgo.Model from cgo.LoadFull):
// parameters are every tensor of the model, in the GGUF file's order.
type FullPolicy interface {
	Full() bool
	Params() []cgo.ParamInfo
	ReadParams() ([][]float32, error)
	WriteParams([][]float32) error
	ZeroGrads() error
	ForwardBackward(batch []cgo.Sequence, obj cgo.Objective, lossScale float32) (cgo.Stats, error)
	BackendOptimizer // AdamWStep, Moments, SetMoments
}

// FullUpdater takes full-training steps: gradient accumulation over
// micro-batches, global-norm clipping and AdamW on the policy's backend.
type FullUpdater struct {
	Policy FullPolicy
	Step   int64 // updates done (= AdamW's t); the next update uses Schedule.LR(Step)
	Meta   map[string]string

	cfg   Config
	infos []cgo.ParamInfo
}

// NewFullUpdater makes a FullUpdater over p with fresh (zero) moments on
// its backend. p must be loaded for full training (cgo.LoadFull).
func NewFullUpdater(p FullPolicy, cfg Config) (*FullUpdater, error) {
	if p == nil || !p.Full() {
		return nil, fmt.Errorf("%w: full SFT needs a model loaded for full training (cgo.LoadFull)", ErrConfig)
	}
	if err := cfg.Schedule.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.AdamW.Validate(); err != nil {
		return nil, err
	}
	if err := p.SetMoments(nil, nil); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	return &FullUpdater{Policy: p, Meta: map[string]string{}, cfg: cfg, infos: p.Params()}, nil
}

// Config returns the update configuration.
func (u *FullUpdater) Config() Config { return u.cfg }

// Update takes one optimizer step on batch: the gradient accumulation of
// Updater.Update (accumulate: token-mean NLL over the trained tokens), then
// clipping and AdamW on the backend (backendAdamW). A batch without trained
// tokens is skipped; a non-finite gradient norm returns ErrNonFinite and
// changes nothing.
func (u *FullUpdater) Update(batch []cgo.Sequence) (Metrics, error) {
	m, err := accumulate(u.Policy, u.cfg, u.Step, u.cfg.Schedule.LR(u.Step), batch)
	if err != nil || m.Skipped {
		return m, err
	}
	if err := backendAdamW(u.Policy, u.cfg.AdamW, u.Step+1, u.cfg.MaxGradNorm, &m); err != nil {
		return m, err
	}
	u.Step++
	return m, nil
}

// Updates is the number of optimizer steps taken.
func (u *FullUpdater) Updates() int64 { return u.Step }

// SaveWithMeta copies meta into the updater's Meta and writes the training
// state to path (Save).
func (u *FullUpdater) SaveWithMeta(path string, meta map[string]string) error {
	maps.Copy(u.Meta, meta)
	return u.Save(path)
}

// RestoreChecked reads the state at path (LoadFullState), calls check with
// its Meta and only then restores it (Restore); it returns the Meta.
// Nothing changes when reading or check fails.
func (u *FullUpdater) RestoreChecked(path string, check func(meta map[string]string) error) (map[string]string, error) {
	return restoreChecked(path, LoadFullState, func(s *FullState) map[string]string { return s.Meta }, check, u.Restore)
}

// FullState is the training state of full SFT: every weight and its AdamW
// moments, in the policy's parameter order (the GGUF file's tensor order).
type FullState struct {
	Names    []string
	Shapes   [][2]int
	Params   [][]float32
	M, V     [][]float32
	AdamW    AdamWConfig
	Step     int64 // updates done = AdamW steps taken
	Schedule Schedule
	Meta     map[string]string
}

// FullStateGeneralType is general.type of a full-SFT state file, so that
// neither llama.cpp nor the LoRA state reader (Load) mistakes it for theirs.
const FullStateGeneralType = statefile.FullGeneralType

// State returns a deep copy of the training state (weights and moments
// read from the backend).
func (u *FullUpdater) State() (*FullState, error) {
	vals, err := u.Policy.ReadParams()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the parameters: %w", ErrUpdate, err)
	}
	mom, vel, err := u.Policy.Moments()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the moments: %w", ErrUpdate, err)
	}
	s := &FullState{Params: vals, M: mom, V: vel, AdamW: u.cfg.AdamW, Step: u.Step, Schedule: u.cfg.Schedule, Meta: map[string]string{}}
	for _, p := range u.infos {
		s.Names = append(s.Names, p.Name)
		s.Shapes = append(s.Shapes, p.Shape)
	}
	for k, v := range u.Meta {
		s.Meta[k] = v
	}
	return s, nil
}

// Save writes the training state to path atomically (SaveFullState).
func (u *FullUpdater) Save(path string) error {
	s, err := u.State()
	if err != nil {
		return err
	}
	return SaveFullState(path, s)
}

// Restore loads a state into the updater: weights, moments, step, schedule
// and AdamW settings. Its tensors must be the policy's (same names and
// shapes, same order).
func (u *FullUpdater) Restore(s *FullState) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(s.Names) != len(u.infos) {
		return fmt.Errorf("%w: the state has %d tensors, the model %d", ErrState, len(s.Names), len(u.infos))
	}
	for i, p := range u.infos {
		if s.Names[i] != p.Name || s.Shapes[i] != p.Shape {
			return fmt.Errorf("%w: state tensor %d is %s %v, the model's %s %v", ErrState, i, s.Names[i], s.Shapes[i], p.Name, p.Shape)
		}
	}
	if err := u.Policy.WriteParams(s.Params); err != nil {
		return fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	if err := u.Policy.SetMoments(s.M, s.V); err != nil {
		return fmt.Errorf("%w: %w", ErrUpdate, err)
	}
	u.Step = s.Step
	u.cfg.Schedule, u.cfg.AdamW = s.Schedule, s.AdamW
	u.Meta = map[string]string{}
	for k, v := range s.Meta {
		u.Meta[k] = v
	}
	return nil
}

func (s *FullState) check() error {
	n := len(s.Names)
	if n == 0 || len(s.Shapes) != n || len(s.Params) != n || len(s.M) != n || len(s.V) != n {
		return fmt.Errorf("%w: full state: %d names, %d shapes, %d tensors, %d/%d moments", ErrState, n, len(s.Shapes), len(s.Params), len(s.M), len(s.V))
	}
	for i, sh := range s.Shapes {
		k := sh[0] * sh[1]
		if k < 1 || len(s.Params[i]) != k || len(s.M[i]) != k || len(s.V[i]) != k {
			return fmt.Errorf("%w: full state: %s %v holds %d values, moments %d/%d", ErrState, s.Names[i], sh, len(s.Params[i]), len(s.M[i]), len(s.V[i]))
		}
	}
	if s.Step < 0 {
		return fmt.Errorf("%w: negative step count", ErrState)
	}
	if err := s.Schedule.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := s.AdamW.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	return nil
}

// Full-state file format: one GGUF (written atomically by
// gguf.Writer.WriteFile) with general.type = FullStateGeneralType, the
// metadata keys of the LoRA state (empo2.state.version, empo2.state.step,
// empo2.adamw.*, empo2.schedule.*, empo2.meta.<key>; empo2.adamw.steps =
// empo2.state.step), and per parameter, in order, the F32 tensors "<name>"
// (the weight, its GGUF shape: [n] for vectors), "<name>.adam_m" and
// "<name>.adam_v". Everything at full precision: save then load is bit-exact.

// SaveFullState writes s to path atomically.
func SaveFullState(path string, s *FullState) error {
	if err := s.check(); err != nil {
		return err
	}
	w := gguf.NewWriter()
	w.AddKV(lora.KeyGeneralType, FullStateGeneralType)
	w.AddKV(keyStateVersion, uint32(StateVersion))
	w.AddKV(keyStateStep, s.Step)
	w.AddKV(keyAdamSteps, s.Step)
	w.AddKV(keyAdamBeta1, s.AdamW.Beta1)
	w.AddKV(keyAdamBeta2, s.AdamW.Beta2)
	w.AddKV(keyAdamEps, s.AdamW.Eps)
	w.AddKV(keyAdamWD, s.AdamW.WeightDecay)
	w.AddKV(keySchedKind, string(s.Schedule.Kind))
	w.AddKV(keySchedBase, s.Schedule.BaseLR)
	w.AddKV(keySchedMin, s.Schedule.MinLR)
	w.AddKV(keySchedWarmup, int64(s.Schedule.Warmup))
	w.AddKV(keySchedTotal, int64(s.Schedule.Total))
	keys := make([]string, 0, len(s.Meta))
	for k := range s.Meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.AddKV(keyMetaPrefix+k, s.Meta[k])
	}
	for i, name := range s.Names {
		sh := fullShape(s.Shapes[i])
		for _, t := range []struct {
			name string
			data []float32
		}{{name, s.Params[i]}, {name + suffixM, s.M[i]}, {name + suffixV, s.V[i]}} {
			if err := w.AddTensorF32(t.name, sh, t.data); err != nil {
				return fmt.Errorf("%w: %w", ErrState, err)
			}
		}
	}
	if err := w.WriteFile(path); err != nil {
		return fmt.Errorf("trainer: saving state %s: %w", path, err)
	}
	return nil
}

// fullShape is the GGUF shape of a parameter: [n] for a vector ([n, 1]).
func fullShape(sh [2]int) []uint64 {
	if sh[1] == 1 {
		return []uint64{uint64(sh[0])}
	}
	return []uint64{uint64(sh[0]), uint64(sh[1])}
}

// LoadFullState reads a state file written by SaveFullState. A LoRA state
// or any other GGUF is refused with ErrState.
func LoadFullState(path string) (*FullState, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trainer: reading state %s: %w", path, err)
	}
	defer f.Close()
	if gt, _ := f.String(lora.KeyGeneralType); gt != FullStateGeneralType {
		hint := ""
		if gt == StateGeneralType {
			hint = ": it is the checkpoint of a LoRA SFT/RL run (resume it without --full)"
		}
		return nil, fmt.Errorf("%w: %s: general.type is %q, want %q%s", ErrState, path, gt, FullStateGeneralType, hint)
	}
	if v, ok := f.Uint32(keyStateVersion); !ok || v != StateVersion {
		return nil, fmt.Errorf("%w: %s: state version %v, this build reads %d", ErrState, path, v, StateVersion)
	}
	s := &FullState{Meta: map[string]string{}}
	var errs []error
	geti := func(k string) int64 {
		v, ok := f.Int64(k)
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %s: missing integer %s", ErrState, path, k))
		}
		return v
	}
	getf := func(k string) float64 {
		v, ok := f.Get(k)
		x, isF := v.(float64)
		if !ok || !isF {
			errs = append(errs, fmt.Errorf("%w: %s: missing float64 %s", ErrState, path, k))
		}
		return x
	}
	s.Step = geti(keyStateStep)
	s.AdamW = AdamWConfig{Beta1: getf(keyAdamBeta1), Beta2: getf(keyAdamBeta2), Eps: getf(keyAdamEps), WeightDecay: getf(keyAdamWD)}
	kind, _ := f.String(keySchedKind)
	s.Schedule.Kind = ScheduleKind(kind)
	s.Schedule.BaseLR, s.Schedule.MinLR = getf(keySchedBase), getf(keySchedMin)
	s.Schedule.Warmup, s.Schedule.Total = int(geti(keySchedWarmup)), int(geti(keySchedTotal))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, k := range f.Keys() {
		if m, ok := strings.CutPrefix(k, keyMetaPrefix); ok {
			s.Meta[m], _ = f.String(k)
		}
	}
	read := func(name string, want int) ([]float32, error) {
		ti, ok := f.Tensor(name)
		if !ok || ti.Type != gguf.TypeF32 || ti.NumElements() != uint64(want) {
			return nil, fmt.Errorf("%w: %s: tensor %s missing or not F32 of %d values", ErrState, path, name, want)
		}
		return f.ReadTensorF32(name)
	}
	for _, ti := range f.Tensors {
		if strings.HasSuffix(ti.Name, suffixM) || strings.HasSuffix(ti.Name, suffixV) {
			continue
		}
		var sh [2]int
		switch len(ti.Shape) {
		case 1:
			sh = [2]int{int(ti.Shape[0]), 1}
		case 2:
			sh = [2]int{int(ti.Shape[0]), int(ti.Shape[1])}
		default:
			return nil, fmt.Errorf("%w: %s: tensor %s has %d dimensions", ErrState, path, ti.Name, len(ti.Shape))
		}
		n := sh[0] * sh[1]
		p, err := read(ti.Name, n)
		if err != nil {
			return nil, err
		}
		mom, err := read(ti.Name+suffixM, n)
		if err != nil {
			return nil, err
		}
		vel, err := read(ti.Name+suffixV, n)
		if err != nil {
			return nil, err
		}
		s.Names = append(s.Names, ti.Name)
		s.Shapes = append(s.Shapes, sh)
		s.Params, s.M, s.V = append(s.Params, p), append(s.M, mom), append(s.V, vel)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
