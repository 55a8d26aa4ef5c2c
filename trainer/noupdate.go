package trainer

import "fmt"

// NoUpdateReason says why a step of a run that updates made no optimizer
// step, in words a user can act on ("" when it made some, or the run does
// not update): every group's episodes scored alike (zero variance: every
// advantage 0), every response was dropped by low-probability masking (its
// minimum old log-prob below δ), or no sample was built.
func NoUpdateReason(m StepMetrics, cfg Config) string {
	if m.Updates > 0 || !cfg.Mode.Update {
		return ""
	}
	groups := cfg.Batch.Tasks
	switch {
	case m.SampleSteps == 0 && m.ZeroVarGroups >= groups:
		return fmt.Sprintf("0 updates: in all %d groups every episode had equal scores (zero variance), so every advantage was 0", groups)
	case m.SampleSteps > 0 && m.MaskedSeqs >= m.SampleSteps:
		s := fmt.Sprintf("0 updates: all %d responses masked (old log-prob < δ = %g: update.low_prob_threshold, applied to %s episodes by update.low_prob_mask)",
			m.SampleSteps, cfg.Update.LowProbThreshold, cfg.Update.LowProbMask)
		if m.ZeroVarGroups > 0 {
			s += fmt.Sprintf("; the other %d of %d groups had equal scores", m.ZeroVarGroups, groups)
		}
		return s
	}
	return fmt.Sprintf("0 updates: no training sample was built (sample_steps %d, masked_seqs %d, zero_var_groups %d of %d)",
		m.SampleSteps, m.MaskedSeqs, m.ZeroVarGroups, groups)
}
