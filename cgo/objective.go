package cgo

import (
	"fmt"
	"math"

	"github.com/empo2/empo2/algo"
)

// PolicyLoss is the per-token policy-gradient loss an Objective evaluates:
// for one trained token with log-prob logp under π_θ, old under π_old and
// advantage adv, its loss and dLogp = ∂loss/∂logp (the coefficient the
// backward multiplies ∂logp/∂θ by), and whether a clip bound is active
// (metrics only). EMPO²'s clipped / dual-clip surrogate is algo.PPO, which
// also validates its settings; cgo evaluates the function it is given on
// every token left Trained — it neither validates clip ranges nor masks
// (low-probability masking is the caller's: trainer.BuildSamples with
// algo.Masked).
type PolicyLoss interface {
	Token(logp, old, adv float64) (loss, dLogp float64, clipped, dualClipped bool)
}

// validateObjective checks what the graph itself needs of obj and fills
// defaults: the aggregation, finite KL and entropy coefficients, β ≥ 0, a
// policy loss unless NLL.
// The policy loss's own settings are its caller's to validate.
func validateObjective(obj Objective) (Objective, error) {
	if obj.Aggregation == "" {
		obj.Aggregation = AggTokenMean
	}
	if !obj.Aggregation.Valid() {
		return obj, fmt.Errorf("%w: aggregation %q (want %q or %q)", ErrConfig, obj.Aggregation, AggTokenMean, AggSeqMeanTokenMean)
	}
	for _, v := range []float32{obj.KLCoef, obj.EntropyCoef} {
		if !finite32(v) {
			return obj, fmt.Errorf("%w: objective coefficient %v", ErrNonFinite, v)
		}
	}
	if obj.KLCoef < 0 {
		return obj, fmt.Errorf("%w: KLCoef %v < 0", ErrConfig, obj.KLCoef)
	}
	if obj.Policy == nil && !obj.NLL {
		return obj, fmt.Errorf("%w: no policy loss (Objective.Policy, e.g. algo.PPO)", ErrConfig)
	}
	return obj, nil
}

func finite32(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// trainedCount is the number of trained tokens of s (position 0 never is:
// it has no prediction). It tolerates short slices by ignoring them.
func trainedCount(s *Sequence) (n int) {
	for t := 1; t < len(s.Tokens) && t < len(s.Trained); t++ {
		if s.Trained[t] {
			n++
		}
	}
	return n
}

// tokenTerm is the per-token objective and its partial derivatives.
type tokenTerm struct {
	loss      float64 // ℓ = ℓ_pg + β·kl − c_H·H
	pg        float64 // policy loss ℓ_pg (Objective.Policy)
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

// tokenObjective evaluates one trained token: the policy loss
// obj.Policy.Token (or, with obj.NLL, ℓ = −logp), the k3 KL to the
// reference (Schulman, "Approximating KL Divergence", 2020:
// kl = exp(ref − logp) − (ref − logp) − 1, ∂kl/∂logp = 1 − exp(ref − logp))
// weighted by β, the entropy bonus ℓ −= c_H·H, and the KL(π_old‖π)
// estimators k1, k3 of the metrics.
func tokenObjective(obj Objective, logp, old, adv float64, ref float64, hasRef bool, ent float64) tokenTerm {
	tt := tokenTerm{logp: logp, old: old, entropy: ent}
	if obj.NLL { // SFT: no behaviour policy; ratio 1 keeps the KL metrics at 0
		old, tt.old = logp, logp
	}
	lr := logp - old
	lrc := algo.ClampLogRatio(lr)
	r := math.Exp(lrc)
	tt.ratio = r
	if obj.NLL { // supervised cross-entropy: ℓ = −logp, ∂ℓ/∂logp = −1 (no ratio, no clip)
		tt.pg, tt.dLogp = -logp, -1
	} else {
		tt.pg, tt.dLogp, tt.clipped, tt.dualClip = obj.Policy.Token(logp, old, adv)
	}
	tt.loss = tt.pg
	// KL(π_old‖π) estimators on samples from π_old (metrics only)
	tt.k1 = -lr
	tt.k3 = (r - 1) - lrc
	if hasRef && obj.KLCoef != 0 {
		d := algo.ClampLogRatio(ref - logp)
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
