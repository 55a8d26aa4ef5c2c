package algo

import (
	"strings"
	"testing"
)

func TestLowProbMaskApplies(t *testing.T) {
	for _, c := range []struct {
		m    LowProbMask
		mode Mode
		want bool
	}{
		{MaskOffPolicy, ModeOffPolicy, true}, {MaskOffPolicy, ModeOnPolicyTips, false}, {MaskOffPolicy, ModeOnPolicy, false},
		{MaskMemorySteps, ModeOffPolicy, true}, {MaskMemorySteps, ModeOnPolicyTips, true}, {MaskMemorySteps, ModeOnPolicy, false},
		{MaskEveryStep, ModeOnPolicy, true}, {MaskEveryStep, ModeOffPolicy, true}, {MaskNever, ModeOffPolicy, false}, {MaskNever, ModeOnPolicy, false},
	} {
		if got := c.m.Applies(c.mode); got != c.want {
			t.Errorf("%s.Applies(%s) = %v", c.m, c.mode, got)
		}
	}
	for _, m := range []LowProbMask{MaskOffPolicy, MaskMemorySteps, MaskEveryStep, MaskNever} {
		if err := m.Check(); err != nil {
			t.Error(err)
		}
	}
	if err := LowProbMask("tips").Check(); err == nil || !strings.Contains(err.Error(), `renamed "memory-steps"`) {
		t.Errorf("former name: %v", err)
	}
	if err := LowProbMask("sometimes").Check(); err == nil {
		t.Error("unknown scope accepted")
	}
}

// TestMasked: a response is masked when its minimum old log-prob is below
// δ, not at δ; an empty one never.
func TestMasked(t *testing.T) {
	for _, c := range []struct {
		lp   []float32
		want bool
	}{
		{[]float32{-0.1, -4.9, -1}, false}, {[]float32{-0.1, -5, -1}, false}, {[]float32{-0.1, -5.01, -1}, true},
		{[]float32{-30}, true}, {nil, false},
	} {
		if got := Masked(c.lp, DefaultLowProbThreshold); got != c.want {
			t.Errorf("Masked(%v) = %v", c.lp, got)
		}
	}
}
