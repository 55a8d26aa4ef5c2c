package algo

// Mode is the EMPO² mode of a rollout and of its update (metrics.jsonl
// "mode").
type Mode string

// EMPO² modes.
const (
	ModeOffPolicy    Mode = "off-policy"     // rollouts with tips, update without them
	ModeOnPolicyTips Mode = "on-policy-tips" // rollouts and update with tips
	ModeOnPolicy     Mode = "on-policy"      // no memory
	// ModeMixed is not an episode's mode: metrics.jsonl's "mode" of a step
	// whose episodes drew their own (mode.per: rollout).
	ModeMixed Mode = "mixed"
)

// Memory reports whether a rollout in mode m retrieves tips before every
// action (off-policy and on-policy-tips; the zero Mode does not).
func (m Mode) Memory() bool { return m == ModeOffPolicy || m == ModeOnPolicyTips }

// RolloutMode is the mode of a rollout outside training (evaluation,
// adaptation trials), where only its rollout side matters: with memory
// on-policy-tips, else on-policy.
func RolloutMode(memory bool) Mode {
	if memory {
		return ModeOnPolicyTips
	}
	return ModeOnPolicy
}

// DrawMode maps one uniform u ∈ [0,1) to the EMPO² mode (reference code):
// u < p·q off-policy, p·q ≤ u < p on-policy with tips, else on-policy.
// With p = 0.25, q = 0.68 the thresholds are 0.17 and 0.25.
func DrawMode(u, p, q float64) Mode {
	switch {
	case u < p*q:
		return ModeOffPolicy
	case u < p:
		return ModeOnPolicyTips
	}
	return ModeOnPolicy
}
