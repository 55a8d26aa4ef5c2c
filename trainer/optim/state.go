package optim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/statefile"
)

// ErrState means a training-state file is not one, is of another version or
// is inconsistent with itself.
var ErrState = errors.New("trainer: bad training state")

// The state-file format is package statefile's (its doc comment): Save
// writes it, Load reads it. Everything is stored at full precision (F32
// tensors as in memory, float64 hyper-parameters), so Save then Load
// reproduces the state bit for bit.
const (
	StateGeneralType = statefile.GeneralType
	StateVersion     = statefile.Version

	keyStateVersion = statefile.KeyVersion
	keyStateStep    = statefile.KeyStep
	keyAdamSteps    = statefile.KeyAdamSteps
	keyAdamBeta1    = statefile.KeyAdamBeta1
	keyAdamBeta2    = statefile.KeyAdamBeta2
	keyAdamEps      = statefile.KeyAdamEps
	keyAdamWD       = statefile.KeyAdamWD
	keySchedKind    = statefile.KeySchedKind
	keySchedBase    = statefile.KeySchedBase
	keySchedMin     = statefile.KeySchedMin
	keySchedWarmup  = statefile.KeySchedWarm
	keySchedTotal   = statefile.KeySchedTotal
	keyRNG          = statefile.KeyRNG
	keyMetaPrefix   = statefile.KeyMetaPrefix

	suffixM = statefile.SuffixM
	suffixV = statefile.SuffixV
)

// State is everything needed to resume training where it stopped.
type State struct {
	Adapter  *lora.Adapter // current weights
	Opt      *AdamW        // moments in Adapter.Params() order (canonical), and step count t
	Step     int64         // updates completed (the next update uses Schedule.LR(Step))
	Schedule Schedule
	RNG      *rand.PCG         // the training loop's random source; may be nil
	Meta     map[string]string // free-form strings (run name, config digest, …)
}

// AdapterParams returns the adapter's tensors in the canonical order
// (lora.Adapter.Tensors: the order of the moments), aliasing it.
func AdapterParams(a *lora.Adapter) [][]float32 { return a.Tensors() }

func (s *State) check() error {
	if s.Adapter == nil || s.Opt == nil {
		return fmt.Errorf("%w: state needs an adapter and an optimizer", ErrState)
	}
	infos, data := s.Adapter.Params(), s.Adapter.Tensors()
	if len(infos) != len(s.Opt.M) || len(infos) != len(s.Opt.V) {
		return fmt.Errorf("%w: optimizer has %d tensors, adapter %d", ErrState, len(s.Opt.M), len(infos))
	}
	for i, r := range infos {
		if len(s.Opt.M[i]) != len(data[i]) || len(s.Opt.V[i]) != len(data[i]) {
			return fmt.Errorf("%w: moments of %s have %d/%d values, tensor %d", ErrState, r.Name, len(s.Opt.M[i]), len(s.Opt.V[i]), len(data[i]))
		}
		// AdamW keeps every value finite and v ≥ 0 (v is a mean of squares)
		for _, t := range []struct {
			what   string
			x      []float32
			nonNeg bool
		}{{r.Name, data[i], false}, {r.Name + suffixM, s.Opt.M[i], false}, {r.Name + suffixV, s.Opt.V[i], true}} {
			for j, v := range t.x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || (t.nonNeg && v < 0) {
					return fmt.Errorf("%w: %s[%d] = %v: the weights and AdamW moments must be finite (and the second moment ≥ 0)", ErrState, t.what, j, v)
				}
			}
		}
	}
	if s.Step < 0 || s.Opt.Steps < 0 {
		return fmt.Errorf("%w: negative step count", ErrState)
	}
	if err := s.Schedule.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := s.Opt.Config.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	return nil
}

// Save writes the state to path atomically (see the format above).
func Save(path string, s *State) error {
	if err := s.check(); err != nil {
		return err
	}
	w := gguf.NewWriter()
	if err := s.Adapter.AddTo(w, gguf.TypeF32); err != nil {
		return err
	}
	w.AddKV(lora.KeyGeneralType, StateGeneralType) // replaces "adapter" in place
	w.AddKV(keyStateVersion, uint32(StateVersion))
	w.AddKV(keyStateStep, s.Step)
	c := s.Opt.Config
	w.AddKV(keyAdamSteps, s.Opt.Steps)
	w.AddKV(keyAdamBeta1, c.Beta1)
	w.AddKV(keyAdamBeta2, c.Beta2)
	w.AddKV(keyAdamEps, c.Eps)
	w.AddKV(keyAdamWD, c.WeightDecay)
	w.AddKV(keySchedKind, string(s.Schedule.Kind))
	w.AddKV(keySchedBase, s.Schedule.BaseLR)
	w.AddKV(keySchedMin, s.Schedule.MinLR)
	w.AddKV(keySchedWarmup, int64(s.Schedule.Warmup))
	w.AddKV(keySchedTotal, int64(s.Schedule.Total))
	if s.RNG != nil {
		b, err := s.RNG.MarshalBinary()
		if err != nil {
			return fmt.Errorf("trainer: saving RNG: %w", err)
		}
		w.AddKV(keyRNG, b)
	}
	for k, v := range s.Meta {
		w.AddKV(keyMetaPrefix+k, v)
	}
	for i, r := range s.Adapter.Params() {
		sh := []uint64{uint64(r.Shape[0]), uint64(r.Shape[1])}
		if err := w.AddTensorF32(r.Name+suffixM, sh, s.Opt.M[i]); err != nil {
			return err
		}
		if err := w.AddTensorF32(r.Name+suffixV, sh, s.Opt.V[i]); err != nil {
			return err
		}
	}
	if err := w.WriteFile(path); err != nil {
		return fmt.Errorf("trainer: saving state %s: %w", path, err)
	}
	return nil
}

// Load reads a state file written by Save.
func Load(path string) (*State, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trainer: reading state %s: %w", path, err)
	}
	defer f.Close()
	if gt, _ := f.String(lora.KeyGeneralType); gt != StateGeneralType {
		return nil, fmt.Errorf("%w: %s: general.type is %q, want %q (is it an adapter or a model?)", ErrState, path, gt, StateGeneralType)
	}
	if v, ok := f.Uint32(keyStateVersion); !ok || v != StateVersion {
		return nil, fmt.Errorf("%w: %s: state version %v, this build reads %d", ErrState, path, v, StateVersion)
	}
	a, err := lora.FromGGUFWith(f, lora.ReadOptions{
		GeneralType: StateGeneralType,
		Skip: func(n string) bool {
			return strings.HasSuffix(n, suffixM) || strings.HasSuffix(n, suffixV)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &State{Adapter: a, Meta: map[string]string{}}
	for k := range a.Meta {
		if strings.HasPrefix(k, "empo2.") {
			delete(a.Meta, k)
		}
	}
	for _, k := range f.Keys() {
		if m, ok := strings.CutPrefix(k, keyMetaPrefix); ok {
			s.Meta[m], _ = f.String(k)
		}
	}
	i64 := func(k string) (int64, error) {
		v, ok := f.Int64(k)
		if !ok {
			return 0, fmt.Errorf("%w: %s: missing integer %s", ErrState, path, k)
		}
		return v, nil
	}
	f64 := func(k string) (float64, error) {
		v, ok := f.Get(k)
		x, isF := v.(float64)
		if !ok || !isF {
			return 0, fmt.Errorf("%w: %s: missing float64 %s", ErrState, path, k)
		}
		return x, nil
	}
	var errs []error
	get := func(dst *float64, k string) {
		v, err := f64(k)
		errs = append(errs, err)
		*dst = v
	}
	geti := func(dst *int64, k string) {
		v, err := i64(k)
		errs = append(errs, err)
		*dst = v
	}
	var cfg AdamWConfig
	var adamSteps, warm, total int64
	geti(&s.Step, keyStateStep)
	geti(&adamSteps, keyAdamSteps)
	get(&cfg.Beta1, keyAdamBeta1)
	get(&cfg.Beta2, keyAdamBeta2)
	get(&cfg.Eps, keyAdamEps)
	get(&cfg.WeightDecay, keyAdamWD)
	get(&s.Schedule.BaseLR, keySchedBase)
	get(&s.Schedule.MinLR, keySchedMin)
	geti(&warm, keySchedWarmup)
	geti(&total, keySchedTotal)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	kind, _ := f.String(keySchedKind)
	s.Schedule.Kind = ScheduleKind(kind)
	s.Schedule.Warmup, s.Schedule.Total = int(warm), int(total)
	if err := s.Schedule.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrState, path, err)
	}
	infos := a.Params()
	sizes := make([]int, len(infos))
	for i, r := range infos {
		sizes[i] = r.Shape[0] * r.Shape[1]
	}
	opt, err := NewAdamW(cfg, sizes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrState, path, err)
	}
	opt.Steps = adamSteps
	for i, r := range infos {
		for _, mv := range []struct {
			suffix string
			dst    []float32
		}{{suffixM, opt.M[i]}, {suffixV, opt.V[i]}} {
			name := r.Name + mv.suffix
			ti, ok := f.Tensor(name)
			if !ok || ti.Type != gguf.TypeF32 || ti.NumElements() != uint64(len(mv.dst)) {
				return nil, fmt.Errorf("%w: %s: moment tensor %s missing or not F32 of %d values", ErrState, path, name, len(mv.dst))
			}
			data, err := f.ReadTensorF32(name)
			if err != nil {
				return nil, fmt.Errorf("trainer: %s: %w", path, err)
			}
			copy(mv.dst, data)
		}
	}
	s.Opt = opt
	if v, ok := f.Get(keyRNG); ok {
		b, isBytes := v.([]uint8)
		if !isBytes {
			return nil, fmt.Errorf("%w: %s: %s is not a byte array", ErrState, path, keyRNG)
		}
		s.RNG = &rand.PCG{}
		if err := s.RNG.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("%w: %s: RNG state: %v", ErrState, path, err)
		}
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
