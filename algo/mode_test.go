package algo

import "testing"

// TestDrawMode: the reference's thresholds 0.17 and 0.25 (p = 0.25,
// q = 0.68), and the paper's text (p = ½, q = ⅓: 1/6 and ½).
func TestDrawMode(t *testing.T) {
	for _, c := range []struct {
		u, p, q float64
		want    Mode
	}{
		{0, 0.25, 0.68, ModeOffPolicy}, {0.1699, 0.25, 0.68, ModeOffPolicy}, {0.1701, 0.25, 0.68, ModeOnPolicyTips},
		{0.2499, 0.25, 0.68, ModeOnPolicyTips}, {0.25, 0.25, 0.68, ModeOnPolicy}, {0.99, 0.25, 0.68, ModeOnPolicy},
		{0.16, 0.5, 1.0 / 3, ModeOffPolicy}, {0.17, 0.5, 1.0 / 3, ModeOnPolicyTips}, {0.5, 0.5, 1.0 / 3, ModeOnPolicy},
		{0.999, 1, 1, ModeOffPolicy}, {0, 0, 1, ModeOnPolicy}, // memory-only with q = 1; GRPO (p = 0)
	} {
		if got := DrawMode(c.u, c.p, c.q); got != c.want {
			t.Errorf("DrawMode(%v, %v, %v) = %s, want %s", c.u, c.p, c.q, got, c.want)
		}
	}
}

func TestModeMemory(t *testing.T) {
	for m, want := range map[Mode]bool{ModeOffPolicy: true, ModeOnPolicyTips: true, ModeOnPolicy: false, "": false, ModeMixed: false} {
		if m.Memory() != want {
			t.Errorf("%q.Memory() = %v", m, !want)
		}
	}
	if RolloutMode(true) != ModeOnPolicyTips || RolloutMode(false) != ModeOnPolicy {
		t.Error("RolloutMode")
	}
}
