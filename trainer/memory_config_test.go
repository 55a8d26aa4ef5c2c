package trainer

import (
	"errors"
	"strings"
	"testing"
)

// TestMemorySettingsMeanWhatTheySay: memory.top_k 0 is refused (before, it
// silently became 10), memory.threshold 0 is a threshold, the masking
// scopes' former names are refused with their new ones, and the empo2
// preset runs the reference code's memory.
func TestMemorySettingsMeanWhatTheySay(t *testing.T) {
	c, err := LoadConfig("", "empo2", []string{"memory.threshold=0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil || c.Memory.Threshold != 0 {
		t.Fatalf("threshold 0: %v, %v", c.Memory.Threshold, err)
	}
	if c.Memory.Key != "conversation" || c.Memory.TipsIn != "every-turn" || c.Memory.KeyPieces != 256 || c.Memory.TopK != 10 ||
		c.Rollout.TipMaxTokens != 512 || c.Memory.IntrinsicCoef != 1 || c.Update.LowProbMask != MaskOffPolicy {
		t.Fatalf("the empo2 preset's memory: %+v, tip_max_tokens %d, mask %s", c.Memory, c.Rollout.TipMaxTokens, c.Update.LowProbMask)
	}
	for set, want := range map[string]string{
		"memory.top_k=0":              "top_k 0",
		"memory.key=state":            "memory.key",
		"memory.tips_in=first":        "tips_in",
		"memory.key_pieces=0":         "key_pieces",
		"update.low_prob_mask=tips":   `renamed "memory-steps"`,
		"update.low_prob_mask=always": `renamed "every-step"`,
		"update.low_prob_mask=some":   "want off-policy, memory-steps, every-step or never",
	} {
		c, err := LoadConfig("", "empo2", []string{set})
		if err == nil {
			err = c.Validate()
		}
		if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v (want %q)", set, err, want)
		}
	}
	for _, m := range []LowProbMask{MaskOffPolicy, MaskMemorySteps, MaskEveryStep, MaskNever} {
		c, _ := LoadConfig("", "empo2", []string{"update.low_prob_mask=" + string(m)})
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	for _, c := range []struct {
		m    LowProbMask
		mode Mode
		want bool
	}{
		{MaskOffPolicy, ModeOffPolicy, true}, {MaskOffPolicy, ModeOnPolicyTips, false}, {MaskOffPolicy, ModeOnPolicy, false},
		{MaskMemorySteps, ModeOffPolicy, true}, {MaskMemorySteps, ModeOnPolicyTips, true}, {MaskMemorySteps, ModeOnPolicy, false},
		{MaskEveryStep, ModeOnPolicy, true}, {MaskNever, ModeOffPolicy, false},
	} {
		if c.m.Applies(c.mode) != c.want {
			t.Errorf("%s applies to %s: %v", c.m, c.mode, !c.want)
		}
	}
}
