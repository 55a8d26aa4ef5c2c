package trainer

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// TestConfigValuesChecked: every bad value is refused before a run starts
// (by LoadConfig's decoding or by Validate), and the error names the key
// and the value.
func TestConfigValuesChecked(t *testing.T) {
	for _, tc := range []struct {
		set      string
		key, val string
	}{
		{"update.clip_low=.nan", "update.clip_low", ".nan"},
		{"update.clip_high=.inf", "update.clip_high", ".inf"},
		{"update.dual_clip=.nan", "update.dual_clip", ".nan"},
		{"update.low_prob_threshold=.nan", "update.low_prob_threshold", ".nan"},
		{"advantage.reward_scale=.inf", "advantage.reward_scale", ".inf"},
		{"advantage.eps=.nan", "advantage.eps", ".nan"},
		{"memory.intrinsic_coef=.nan", "memory.intrinsic_coef", ".nan"},
		{"memory.threshold=.nan", "memory.threshold", ".nan"},
		{"update.lr=1e300", "update.lr", "1e+300"},
		{"update.max_grad_norm=-1", "update.max_grad_norm", "-1"},
		{"update.low_prob_threshold=2", "update.low_prob_threshold", "2"},
		{"memory.threshold=3", "memory.threshold", "3"},
		{"memory.intrinsic_coef=-1", "memory.intrinsic_coef", "-1"},
		{"advantage.reward_scale=0", "advantage.reward_scale", "0"},
		{"lora.alpha=.nan", "lora.alpha", ".nan"},
		{"lora.alpha=0", "lora.alpha", "0"},
		{"update.clip_low=1", "update.clip_low", "1"},
		{"update.beta2=1", "update.beta2", "1"},
		{"steps=1.5", "steps", "1.5"},
		{"lora.rank=8.9", "lora.rank", "8.9"},
		{"batch.tasks=2.5", "batch.tasks", "2.5"},
		{"eval.episodes=1.5", "eval.episodes", "1.5"},
		{"batch.tasks=4294967296", "batch.tasks", "4294967296"},
		{"lora.targets=[]", "lora.targets", "[]"},
		{"lora.targets=[q, nope]", "lora.targets", "nope"},
		{"steps=-1", "steps", "-1"},
		{"context=10", "context", "10"},
		{"lora.targets=[q, q]", "lora.targets", "listed twice"},
		{"env_options.step_limit=-5", "env_options.step_limit", "-5"},
		{"eval.temperature=-1", "eval.temperature", "-1"},
	} {
		c, err := LoadConfig("", "", []string{"model=m.gguf", tc.set})
		if err == nil {
			err = c.Validate()
		}
		if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.val) {
			t.Errorf("--set %s: want an error naming %s and %s, got %v", tc.set, tc.key, tc.val, err)
		}
	}
	// sizes whose product overflows, or exceeds the sequences llama.cpp
	// decodes together (one KV sequence per episode)
	c, err := LoadConfig("", "", []string{"batch.tasks=200", "batch.rollouts=200"})
	if err == nil {
		err = c.Validate()
	}
	if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "batch.tasks × batch.rollouts") || !strings.Contains(err.Error(), "40000") {
		t.Errorf("batch 200 × 200: %v", err)
	}
	// factors whose int64 product wraps to 0 (2^32 × 2^32) are refused too,
	// naming the settings (it was "pool size 0")
	c, err = LoadConfig("", "", []string{"batch.tasks=4294967296", "batch.rollouts=4294967296"})
	if err == nil {
		err = c.Validate()
	}
	if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "batch.tasks 4294967296, batch.rollouts 4294967296") {
		t.Errorf("batch 2^32 × 2^32: %v", err)
	}
	// Go callers: non-finite values set in Go are refused too
	for _, set := range []func(*Config){
		func(c *Config) { c.Update.ClipLow = float32(math.NaN()) },
		func(c *Config) { c.Memory.IntrinsicCoef = math.Inf(1) },
		func(c *Config) { c.Advantage.Eps = math.NaN() },
	} {
		c := DefaultConfig()
		set(&c)
		if err := c.Validate(); !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "finite") {
			t.Errorf("non-finite value set in Go: %v", err)
		}
	}
	if err := func() error { c := DefaultConfig(); return c.Validate() }(); err != nil {
		t.Fatalf("default configuration: %v", err)
	}
}
