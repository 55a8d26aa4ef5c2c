package rollout_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// NewRoller uses the memory settings as given: a threshold of 0 (every
// tip with a positive cosine) is not replaced by the default 0.5, which
// made `eval --threshold 0` impossible; a zero MemoryConfig is refused
// (MemoryConfig.Validate), not filled in. success_score 0 is the
// environment's (textlab: 100); one that is not a finite number is refused.
func TestNewRollerKeepsSettings(t *testing.T) {
	m := testutil.Model(t)
	c := testutil.Context(t, m, 1)
	mc := rollout.DefaultMemoryConfig()
	mc.Threshold = 0
	r, err := rollout.NewRoller(c, rollout.DefaultConfig(), rollout.Options{Env: "textlab", MemoryConfig: mc})
	require.NoError(t, err)
	assert.Equal(t, 0.0, r.MemoryConfig().Threshold)
	assert.Equal(t, 100.0, r.SuccessScore())
	_, err = rollout.NewRoller(c, rollout.DefaultConfig(), rollout.Options{Env: "textlab"})
	assert.ErrorContains(t, err, "memory.embedder is empty")

	cfg := rollout.DefaultConfig()
	cfg.SuccessScore = 71
	r, err = rollout.NewRoller(c, cfg, rollout.Options{Env: "textlab", MemoryConfig: rollout.DefaultMemoryConfig()})
	require.NoError(t, err)
	assert.Equal(t, 71.0, r.SuccessScore())
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		cfg.SuccessScore = bad
		_, err = rollout.NewRoller(c, cfg, rollout.Options{Env: "textlab", MemoryConfig: rollout.DefaultMemoryConfig()})
		assert.ErrorIs(t, err, rollout.ErrRollout)
		assert.ErrorContains(t, err, "success score")
	}
	assert.True(t, rollout.Succeeded(71, 71))
	assert.False(t, rollout.Succeeded(70, 71))
}
