package trainer

import "testing"

// TestOldLogpOnGPU: with rollouts on a GPU, π_old is the engine's recompute
// whatever update.old_logp says (docs/gpu.md: the GPU rollouts' log-probs
// differ by up to 1e-2).
func TestOldLogpOnGPU(t *testing.T) {
	for _, o := range []OldLogp{OldLogpRollout, OldLogpRecompute} {
		cfg := DefaultConfig()
		cfg.Update.OldLogp = o
		oldLogpOnGPU(&cfg)
		if cfg.Update.OldLogp != OldLogpRecompute {
			t.Errorf("old_logp %s on a GPU: %s, want recompute", o, cfg.Update.OldLogp)
		}
	}
}
