package algo

import (
	"fmt"
	"math"
)

// DefaultLowProbThreshold is δ of low-probability masking: a response
// whose minimum old log-prob is below −5 is left out (the reference code).
const DefaultLowProbThreshold float32 = -5

// LowProbMask is where low-probability masking applies
// (update.low_prob_mask), by the episode's mode. The EMPO² sources differ:
// the paper's text ties masking to the off-policy updates (MaskOffPolicy,
// the default); an earlier version of the reference code masked every
// step of an EMPO² run (MaskEveryStep); its last 7B configuration has
// masking off (MaskNever).
type LowProbMask string

// Masking scopes.
const (
	MaskOffPolicy   LowProbMask = "off-policy"   // off-policy episodes (the paper's text)
	MaskMemorySteps LowProbMask = "memory-steps" // episodes that retrieved tips: off-policy and on-policy-tips
	MaskEveryStep   LowProbMask = "every-step"   // every episode (an earlier version of the reference code)
	MaskNever       LowProbMask = "never"        // no masking (the reference code's last 7B config)
)

// Valid reports whether m is a known scope.
func (m LowProbMask) Valid() bool {
	return m == MaskOffPolicy || m == MaskMemorySteps || m == MaskEveryStep || m == MaskNever
}

// renamedMasks are the scopes' former names, refused with their new ones.
var renamedMasks = map[LowProbMask]LowProbMask{"tips": MaskMemorySteps, "always": MaskEveryStep}

// Check reports an unknown scope, naming the new name of a former one.
func (m LowProbMask) Check() error {
	if n, ok := renamedMasks[m]; ok {
		return fmt.Errorf("update.low_prob_mask %q was renamed %q (the scopes are %s, %s, %s, %s)",
			m, n, MaskOffPolicy, MaskMemorySteps, MaskEveryStep, MaskNever)
	}
	if !m.Valid() {
		return fmt.Errorf("update.low_prob_mask %q (want %s, %s, %s or %s)", m, MaskOffPolicy, MaskMemorySteps, MaskEveryStep, MaskNever)
	}
	return nil
}

// Applies reports whether masking applies to an episode in mode.
func (m LowProbMask) Applies(mode Mode) bool {
	switch m {
	case MaskEveryStep:
		return true
	case MaskMemorySteps:
		return mode == ModeOffPolicy || mode == ModeOnPolicyTips
	case MaskOffPolicy:
		return mode == ModeOffPolicy
	}
	return false
}

// Masked reports whether a response whose tokens have old log-probs oldLogp
// is left out of the loss by low-probability masking with threshold δ: its
// minimum old log-prob is below δ (EMPO² §3.3; the reference's verl recipe
// masks the whole response). An empty response is not masked.
func Masked(oldLogp []float32, delta float32) bool {
	m := float32(math.Inf(1))
	for _, v := range oldLogp {
		m = min(m, v)
	}
	return m < delta
}
