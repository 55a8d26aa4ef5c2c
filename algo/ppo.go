package algo

import (
	"fmt"
	"math"
)

// LogRatioClamp bounds log(π/π_old) before exp, as verl does: outside
// [−20, 20] the token is either clipped (zero gradient) or its gradient is
// scaled by r < 2e-9, so the clamp changes nothing measurable and keeps r
// finite.
const LogRatioClamp = 20

// ClampLogRatio is log(π/π_old) clamped to ±LogRatioClamp.
func ClampLogRatio(lr float64) float64 { return math.Max(-LogRatioClamp, math.Min(LogRatioClamp, lr)) }

// PPO is the clipped / dual-clip surrogate: decoupled clip bounds
// 1 − ClipLow ≤ r ≤ 1 + ClipHigh (PPO, Schulman et al. 2017; the decoupled
// bounds of DAPO) and, for negative advantages, the dual-clip bound −c·A
// (Ye et al. 2020), c = DualClip (0: off). It implements cgo.PolicyLoss.
type PPO struct {
	ClipLow  float32 // ε_low: ratio ≥ 1 − ε_low
	ClipHigh float32 // ε_high: ratio ≤ 1 + ε_high
	DualClip float32 // c > 1: bound −c·A for A < 0; 0 = off
}

// DefaultPPO is the reference's ε_low 0.2, ε_high 0.3, dual clip 10.
func DefaultPPO() PPO { return PPO{ClipLow: 0.2, ClipHigh: 0.3, DualClip: 10} }

// Validate reports a non-finite or out-of-range setting: it needs
// 0 ≤ ε_low < 1, ε_high ≥ 0 and c = 0 or c > 1.
func (p PPO) Validate() error {
	for _, v := range []float32{p.ClipLow, p.ClipHigh, p.DualClip} {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("PPO coefficient %v is not finite", v)
		}
	}
	if p.ClipLow < 0 || p.ClipLow >= 1 || p.ClipHigh < 0 || (p.DualClip != 0 && p.DualClip <= 1) {
		return fmt.Errorf("clip range ε_low=%v ε_high=%v, dual clip c=%v (need 0 ≤ ε_low < 1, ε_high ≥ 0, c = 0 or c > 1)", p.ClipLow, p.ClipHigh, p.DualClip)
	}
	return nil
}

// Token evaluates the surrogate on one trained token with log-prob logp
// under π_θ, old under π_old and advantage adv, as a loss:
//
//	r = exp(clamp(logp − old)),  ℓ_clip = max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high))
//	ℓ = min(ℓ_clip, −c·A) for A < 0 (dual clip), else ℓ_clip
//
// dLogp = ∂ℓ/∂logp is −A·r where the unclipped branch is active (∂r/∂logp
// = r) and 0 where a clip is (or where the log-ratio was clamped: r is
// constant there) — the coefficient the training graph's backward
// multiplies ∂logp/∂θ by. clipped and dualClipped say which bound is
// active (metrics). p is assumed valid (Validate).
func (p PPO) Token(logp, old, adv float64) (loss, dLogp float64, clipped, dualClipped bool) {
	lr := logp - old
	lrc := ClampLogRatio(lr)
	r := math.Exp(lrc)
	lo, hi := 1-float64(p.ClipLow), 1+float64(p.ClipHigh)
	rc := math.Max(lo, math.Min(hi, r))
	s1, s2 := -adv*r, -adv*rc
	loss, dLogp = s1, -adv*r
	if s2 > s1 {
		loss, dLogp, clipped = s2, 0, true
	}
	if c := float64(p.DualClip); c > 0 && adv < 0 && loss > -c*adv {
		loss, dLogp, dualClipped = -c*adv, 0, true
	}
	if lr != lrc {
		dLogp = 0
	}
	return loss, dLogp, clipped, dualClipped
}
