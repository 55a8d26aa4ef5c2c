package rollout_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// An episode's Trajectory is what the environment produced: replaying its
// actions on a fresh instance gives its first observation, observations,
// rewards and final score. CheckTips counts the tips by the checker's
// verdict on each episode's own trajectory.
func TestEpisodeTrajectoryAndCheckTips(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	r := testutil.Roller(t, m, 4, testutil.Store(t))
	eps, _, err := r.Run(ctx, testutil.Jobs(4, true))
	require.NoError(t, err)
	env, err := textlab.New(environments.Options{})
	require.NoError(t, err)
	for _, ep := range eps {
		tr := ep.Trajectory()
		assert.Equal(t, ep.Task, tr.Task)
		assert.Equal(t, ep.Variation, tr.Variation)
		res, err := env.Reset(ctx, ep.Task, ep.Variation, ep.Seed)
		require.NoError(t, err)
		assert.Equal(t, res.Observation, tr.FirstObs)
		require.Len(t, tr.Steps, len(ep.Steps))
		for i, s := range tr.Steps {
			assert.Equal(t, ep.Steps[i].Action, s.Action)
			sr, err := env.Step(ctx, s.Action)
			require.NoError(t, err)
			assert.Equal(t, sr.Observation, s.Observation)
			assert.Equal(t, sr.Reward, s.Reward)
		}
		assert.Equal(t, env.Score(), tr.Score)
	}

	chk := environments.TipCheckerOf(textlab.Name)
	require.NotNil(t, chk)
	_, _, ok := rollout.CheckTips(chk, eps).Fractions()
	assert.False(t, ok, "no tips written yet")
	// true tips on episodes 0 and 1, a false score on 2, free text on 3
	for i := range eps {
		tr := eps[i].Trajectory()
		eps[i].Tip = fmt.Sprintf("The task is not complete: score %g/100 after %d steps.", tr.Score, len(tr.Steps))
	}
	eps[2].Tip = fmt.Sprintf("The task is not complete: score %g/100 after %d steps.", eps[2].Score+5, len(eps[2].Steps))
	eps[3].Tip = "I think the frog is in the kitchen."
	tally := rollout.CheckTips(chk, eps)
	assert.Equal(t, rollout.TipTally{Tips: 4, WellFormed: 3, True: 2}, tally)
	tf, wf, ok := tally.Fractions()
	require.True(t, ok)
	assert.Equal(t, 0.5, tf)
	assert.Equal(t, 0.75, wf)
	eps[1].Tip = "" // an episode without a tip is not counted
	assert.Equal(t, rollout.TipTally{Tips: 3, WellFormed: 2, True: 1}, rollout.CheckTips(chk, eps))
}
