package rollout_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/trainer/demos"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// TestOracleTips: with rollout.oracle_tips every episode's tip is the
// oracle's (demos.TrajectoryTip of its trajectory, true by textlab's tip
// checker, for episodes of valid actions), nothing is generated, and the entries carry it with their
// code-written action and score; without the writer the roller is refused.
func TestOracleTips(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	r := testutil.Roller(t, m, 2, mem, func(c *rollout.Config, o *rollout.Options) {
		c.OracleTips = true
		c.CorrectInvalid = rollout.CorrectOn // valid actions (a random model's raw text breaks any sentence grammar)
		c.StepLimit = 6
		o.OracleTip = demos.TrajectoryTip
	})
	eps, _, err := r.Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	n, err := r.WriteTips(ctx, eps, 1)
	require.NoError(t, err)
	assert.Positive(t, n)
	chk := environments.TipCheckerOf(textlab.Name)
	for _, ep := range eps {
		if len(ep.Steps) == 0 {
			continue
		}
		want := rollout.CleanTip(demos.TrajectoryTip(ep.Trajectory()))
		require.Equal(t, want, ep.Tip)
		assert.True(t, chk.CheckTip(ep.Tip, ep.Trajectory()).True(), "%q", ep.Tip)
		ents, err := mem.List(ctx, ep.Namespace(), 0)
		require.NoError(t, err)
		require.NotEmpty(t, ents)
		for _, e := range ents {
			assert.True(t, strings.HasPrefix(e.Content, want+" (At this step the action was"), "%q", e.Content)
		}
	}

	_, err = rollout.NewRoller(testutil.Context(t, m, 1), func() rollout.Config {
		c := rollout.DefaultConfig()
		c.OracleTips = true
		return c
	}(), rollout.Options{Env: "textlab", MemoryConfig: rollout.DefaultMemoryConfig()})
	require.ErrorIs(t, err, rollout.ErrRollout)
}
