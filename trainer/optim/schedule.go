package optim

import (
	"fmt"
	"math"
)

// ScheduleKind is the shape of a learning-rate schedule (YAML
// update.schedule; stored in state files as its string).
type ScheduleKind string

// Learning-rate schedule kinds.
const (
	ScheduleConstant ScheduleKind = "constant"
	ScheduleCosine   ScheduleKind = "cosine"
)

// Valid reports whether k is a known kind.
func (k ScheduleKind) Valid() bool { return k == ScheduleConstant || k == ScheduleCosine }

// Schedule maps an update index (0-based: the index of the step about to be
// taken) to a learning rate. Both kinds start with a linear warmup of Warmup
// steps: lr(s) = BaseLR·(s+1)/(Warmup+1) for s < Warmup, so the first step
// is never taken with lr 0 and the ramp reaches BaseLR at s = Warmup.
//
//   - constant: BaseLR after warmup.
//   - cosine: after warmup, with progress p = (s−Warmup)/(Total−1−Warmup)
//     clamped to [0,1], lr = MinLR + (BaseLR−MinLR)·(1+cos(π·p))/2
//     (SGDR without restarts: Loshchilov & Hutter, "SGDR: Stochastic Gradient
//     Descent with Warm Restarts", ICLR 2017, eq. 5): the first update after
//     warmup is at BaseLR and the last of Total updates, s = Total−1, at
//     MinLR (a single update after warmup stays at BaseLR). Steps past
//     Total stay at MinLR.
type Schedule struct {
	Kind   ScheduleKind // ScheduleConstant or ScheduleCosine
	BaseLR float64      // peak learning rate, > 0
	MinLR  float64      // cosine floor, 0 ≤ MinLR ≤ BaseLR
	Warmup int          // linear warmup steps, ≥ 0
	Total  int          // total updates, warmup included (cosine only), > Warmup
}

// Validate reports ErrConfig for an unusable schedule.
func (s Schedule) Validate() error {
	if !(s.BaseLR > 0) || math.IsInf(s.BaseLR, 0) {
		return fmt.Errorf("%w: base learning rate %v must be positive and finite", ErrConfig, s.BaseLR)
	}
	if s.Warmup < 0 {
		return fmt.Errorf("%w: warmup %d is negative", ErrConfig, s.Warmup)
	}
	if !s.Kind.Valid() {
		return fmt.Errorf("%w: schedule %q: want %q or %q", ErrConfig, s.Kind, ScheduleConstant, ScheduleCosine)
	}
	if s.Kind == ScheduleCosine {
		if s.Total <= s.Warmup {
			return fmt.Errorf("%w: cosine schedule needs total steps (%d) > warmup (%d)", ErrConfig, s.Total, s.Warmup)
		}
		if !(s.MinLR >= 0 && s.MinLR <= s.BaseLR) {
			return fmt.Errorf("%w: min learning rate %v must be in [0, %v]", ErrConfig, s.MinLR, s.BaseLR)
		}
	}
	return nil
}

// LR returns the learning rate for update index step (0-based): LRAt with
// the progress p = (step−Warmup)/(Total−1−Warmup), so that the last update,
// step = Total−1, is at MinLR (0 when Total−1 = Warmup).
func (s Schedule) LR(step int64) float64 {
	if step < 0 {
		step = 0
	}
	p := 0.0
	if n := s.Total - 1 - s.Warmup; n > 0 {
		p = float64(step-int64(s.Warmup)) / float64(n)
	}
	return s.LRAt(step, p)
}

// LRAt returns the learning rate of update index step (0-based) taken at
// progress p of the run (clamped to [0,1]; Total is not used): the
// warmup factor min(1, (step+1)/(Warmup+1)) times BaseLR (constant) or
// times the cosine MinLR + (BaseLR−MinLR)·(1+cos(π·p))/2. A trainer whose
// optimizer steps per training step vary passes the fraction of the run's
// training steps done, so that the schedule ends at MinLR with its last
// update however many there were.
func (s Schedule) LRAt(step int64, p float64) float64 {
	f := 1.0
	if step < int64(s.Warmup) {
		f = float64(max(step, 0)+1) / float64(s.Warmup+1)
	}
	if s.Kind != ScheduleCosine {
		return s.BaseLR * f
	}
	p = min(max(p, 0), 1)
	return f * (s.MinLR + (s.BaseLR-s.MinLR)*0.5*(1+math.Cos(math.Pi*p)))
}
