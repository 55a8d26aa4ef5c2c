package cgo

import (
	"fmt"
	"math"
)

// logRatioClamp bounds log(π/π_old) before exp, as verl does: outside
// [−20, 20] the token is either clipped (zero gradient) or its gradient is
// scaled by r < 2e-9, so the clamp changes nothing measurable and keeps r finite.
const logRatioClamp = 20

// validateObjective checks obj and fills defaults.
func validateObjective(obj Objective) (Objective, error) {
	if obj.Aggregation == "" {
		obj.Aggregation = AggTokenMean
	}
	if !obj.Aggregation.Valid() {
		return obj, fmt.Errorf("%w: aggregation %q (want %q or %q)", ErrConfig, obj.Aggregation, AggTokenMean, AggSeqMeanTokenMean)
	}
	for _, v := range []float32{obj.ClipLow, obj.ClipHigh, obj.DualClip, obj.LowProbThreshold, obj.KLCoef, obj.EntropyCoef} {
		if !finite32(v) {
			return obj, fmt.Errorf("%w: objective coefficient %v", ErrNonFinite, v)
		}
	}
	if obj.ClipLow < 0 || obj.ClipLow >= 1 || obj.ClipHigh < 0 {
		return obj, fmt.Errorf("%w: clip range ε_low=%v ε_high=%v (need 0 ≤ ε_low < 1, ε_high ≥ 0)", ErrConfig, obj.ClipLow, obj.ClipHigh)
	}
	if obj.DualClip != 0 && obj.DualClip <= 1 {
		return obj, fmt.Errorf("%w: dual-clip constant %v must be > 1 (or 0 to disable)", ErrConfig, obj.DualClip)
	}
	if obj.KLCoef < 0 {
		return obj, fmt.Errorf("%w: KLCoef %v < 0", ErrConfig, obj.KLCoef)
	}
	return obj, nil
}

func finite32(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// seqKept reports the number of trained tokens of s and whether s enters the
// loss under EMPO²'s sequence-level low-probability masking (EMPO², arXiv
// 2602.23008, ICLR 2026; its verl recipe masks a response whose minimum
// per-token old log-prob is below −5): a sequence with
// LowProbMask set is dropped when any trained token has OldLogp < δ.
// It assumes s has been validated (or tolerates short slices by ignoring them).
func seqKept(s *Sequence, obj Objective) (n int, keep bool) {
	keep = true
	for t := 1; t < len(s.Tokens) && t < len(s.Trained); t++ {
		if !s.Trained[t] {
			continue
		}
		n++
		if s.LowProbMask && t < len(s.OldLogp) && s.OldLogp[t] < obj.LowProbThreshold {
			keep = false
		}
	}
	return n, keep
}

// tokenTerm is the per-token objective and its partial derivatives.
type tokenTerm struct {
	loss      float64 // ℓ = ℓ_pg + β·kl − c_H·H
	pg        float64 // clipped surrogate ℓ_pg
	dLogp     float64 // ∂ℓ/∂logp
	dEnt      float64 // ∂ℓ/∂H
	clipped   bool    // ε clip active (PPO)
	dualClip  bool    // dual clip active
	k1, k3    float64 // KL(π_old‖π) estimators
	refKL     float64 // k3 to the reference
	ratio     float64 // r = π/π_old (log-ratio clamped to ±20)
	entropy   float64
	logp, old float64
}

// tokenObjective evaluates one trained token.
//
// PPO clipped surrogate (Schulman et al. 2017, eq. 7) with decoupled bounds
// 1−ε_low, 1+ε_high, written as a loss:
//
//	ℓ_clip = max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high))
//
// dual clip for A < 0 (Ye et al. 2020, "Mastering Complex Control in MOBA
// Games with Deep RL", eq. 5): ℓ_pg = min(ℓ_clip, −c·A).
// Its derivative w.r.t. logp (r = exp(logp − logp_old), ∂r/∂logp = r) is
// −A·r where the unclipped branch is active and 0 elsewhere.
//
// k3 KL to the reference (Schulman, "Approximating KL Divergence", 2020):
// kl = exp(ref − logp) − (ref − logp) − 1, ∂kl/∂logp = 1 − exp(ref − logp).
// Entropy bonus: ℓ −= c_H·H.
func tokenObjective(obj Objective, logp, old, adv float64, ref float64, hasRef bool, ent float64) tokenTerm {
	tt := tokenTerm{logp: logp, old: old, entropy: ent}
	if obj.NLL { // SFT: no behaviour policy; ratio 1 keeps the KL metrics at 0
		old, adv, tt.old = logp, 0, logp
	}
	lr := logp - old
	lrc := math.Max(-logRatioClamp, math.Min(logRatioClamp, lr))
	r := math.Exp(lrc)
	tt.ratio = r
	lo, hi := 1-float64(obj.ClipLow), 1+float64(obj.ClipHigh)
	rc := math.Max(lo, math.Min(hi, r))
	s1, s2 := -adv*r, -adv*rc
	pg := s1
	grad := -adv * r
	if s2 > s1 {
		pg, grad, tt.clipped = s2, 0, true
	}
	if c := float64(obj.DualClip); c > 0 && adv < 0 && pg > -c*adv {
		pg, grad, tt.dualClip = -c*adv, 0, true
	}
	if lr != lrc { // outside the clamp: r is constant there
		grad = 0
	}
	tt.pg = pg
	tt.loss = pg
	tt.dLogp = grad
	if obj.NLL { // supervised cross-entropy: ℓ = −logp, ∂ℓ/∂logp = −1 (no ratio, no clip)
		tt.pg, tt.loss, tt.dLogp = -logp, -logp, -1
	}
	// KL(π_old‖π) estimators on samples from π_old (metrics only)
	tt.k1 = -lr
	tt.k3 = (r - 1) - lrc
	if hasRef && obj.KLCoef != 0 {
		d := math.Max(-logRatioClamp, math.Min(logRatioClamp, ref-logp))
		kl := math.Exp(d) - d - 1
		tt.refKL = kl
		tt.loss += float64(obj.KLCoef) * kl
		if d == ref-logp {
			tt.dLogp += float64(obj.KLCoef) * (1 - math.Exp(d))
		}
	}
	if obj.EntropyCoef != 0 {
		tt.loss -= float64(obj.EntropyCoef) * ent
		tt.dEnt = -float64(obj.EntropyCoef)
	}
	return tt
}
