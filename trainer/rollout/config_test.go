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
// made `eval --threshold 0` impossible; only a zero MemoryConfig takes the
// defaults. A success score that is not a finite number is refused.
func TestNewRollerKeepsSettings(t *testing.T) {
	m := testutil.Model(t)
	c := testutil.Context(t, m, 1)
	mc := rollout.DefaultMemoryConfig()
	mc.Threshold = 0
	r, err := rollout.NewRoller(c, rollout.DefaultConfig(), rollout.Options{Env: "textlab", MemoryConfig: mc})
	require.NoError(t, err)
	assert.Equal(t, 0.0, r.MemoryConfig().Threshold)
	r, err = rollout.NewRoller(c, rollout.DefaultConfig(), rollout.Options{Env: "textlab"})
	require.NoError(t, err)
	assert.Equal(t, rollout.DefaultMemoryConfig(), r.MemoryConfig())
	assert.Equal(t, 100.0, r.SuccessScore())

	cfg := rollout.DefaultConfig()
	cfg.SuccessScore = 71
	r, err = rollout.NewRoller(c, cfg, rollout.Options{Env: "textlab"})
	require.NoError(t, err)
	assert.Equal(t, 71.0, r.SuccessScore())
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		cfg.SuccessScore = bad
		_, err = rollout.NewRoller(c, cfg, rollout.Options{Env: "textlab"})
		assert.ErrorIs(t, err, rollout.ErrRollout)
	}
	assert.True(t, rollout.Succeeded(71, 71))
	assert.False(t, rollout.Succeeded(70, 71))
}
