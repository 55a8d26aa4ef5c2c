package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// dyingEnv is textlab whose simulator "dies" at its instance's second
// step when die is set: that Step and everything after return
// ErrSimulatorDied, as a ScienceWorld JVM that crashed.
type dyingEnv struct {
	environments.Env
	die   bool
	steps int
}

func (e *dyingEnv) Reset(ctx context.Context, task string, v int, seed int64) (environments.ResetResult, error) {
	if e.die && e.steps >= 2 {
		return environments.ResetResult{}, fmt.Errorf("%w: gone", environments.ErrSimulatorDied)
	}
	return e.Env.Reset(ctx, task, v, seed)
}

func (e *dyingEnv) Step(ctx context.Context, a string) (environments.StepResult, error) {
	e.steps++
	if e.die && e.steps >= 2 {
		return environments.StepResult{}, fmt.Errorf("%w: the JVM exited (signal: killed)", environments.ErrSimulatorDied)
	}
	return e.Env.Step(ctx, a)
}

var dyingMade atomic.Int32

func init() {
	tl, err := environments.Lookup("textlab")
	if err != nil {
		panic(err)
	}
	// textlab with the EMPO² recipe's defaults as an environment's own.
	environments.Register(environments.Spec{Name: "textlab-recipe", New: tl.New, Tasks: tl.Tasks,
		Defaults: environments.Defaults{CorrectActions: true, SuccessScore: 40}})
	// textlab whose first instance dies at its second step.
	environments.Register(environments.Spec{Name: "textlab-dying", Tasks: tl.Tasks,
		New: func(o environments.Options) (environments.Env, error) {
			e, err := tl.New(o)
			if err != nil {
				return nil, err
			}
			return &dyingEnv{Env: e, die: dyingMade.Add(1) == 1}, nil
		}})
}

func corrected(eps []rollout.Episode) int {
	n := 0
	for _, ep := range eps {
		for _, s := range ep.Steps {
			if s.Corrected {
				n++
			}
		}
	}
	return n
}

// TestCorrectionAndSuccessFromEnvironment: rollout.correct_invalid auto
// and a zero success score take the environment's defaults (textlab: off,
// 100; an environment asking for the recipe: on, 40); the run's own
// settings win over them.
func TestCorrectionAndSuccessFromEnvironment(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	plain := testutil.Roller(t, m, 2, nil)
	assert.Equal(t, rollout.CorrectOff, plain.Config().CorrectInvalid)
	assert.Equal(t, 100.0, plain.SuccessScore())
	eps, _, err := plain.Run(ctx, testutil.Jobs(2, false))
	require.NoError(t, err)
	assert.Zero(t, corrected(eps))

	recipe := testutil.Roller(t, m, 2, nil, func(_ *rollout.Config, o *rollout.Options) { o.Env = "textlab-recipe" })
	assert.Equal(t, rollout.CorrectOn, recipe.Config().CorrectInvalid)
	assert.Equal(t, 40.0, recipe.SuccessScore())
	eps, _, err = recipe.Run(ctx, testutil.Jobs(2, false))
	require.NoError(t, err)
	assert.Positive(t, corrected(eps), "the environment's default corrects the tiny model's actions")
	for _, ep := range eps {
		assert.Equal(t, ep.Score >= 40, ep.Success)
	}

	own := testutil.Roller(t, m, 2, nil, func(c *rollout.Config, o *rollout.Options) {
		o.Env, c.CorrectInvalid, c.SuccessScore = "textlab-recipe", rollout.CorrectOff, 90
	})
	assert.Equal(t, rollout.CorrectOff, own.Config().CorrectInvalid)
	assert.Equal(t, 90.0, own.SuccessScore())
	eps, _, err = own.Run(ctx, testutil.Jobs(2, false))
	require.NoError(t, err)
	assert.Zero(t, corrected(eps))

	c, err := llama.NewContext(m, llama.ContextParams{NSeqMax: 1, NCtx: 512, Threads: 1})
	require.NoError(t, err)
	defer c.Close()
	cfg := rollout.DefaultConfig()
	cfg.CorrectInvalid = "sometimes"
	_, err = rollout.NewRoller(c, cfg, rollout.Options{Env: "textlab"})
	assert.ErrorIs(t, err, rollout.ErrRollout)
}

// TestEndReasons: an episode cut by the environment's own step limit ends
// on "step-limit", not "done"; one whose next prompt no longer fits ends on
// "context"; CountEnds counts every reason, and most episodes ending on a
// full context is a warning.
func TestEndReasons(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	// the environment's limit (2 moves) ends the episodes, the rollout's
	// own (0: the environment's) agrees
	r := testutil.Roller(t, m, 4, nil, func(c *rollout.Config, o *rollout.Options) {
		c.StepLimit, o.EnvOptions.StepLimit = 0, 2
	})
	eps, _, err := r.Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	for _, ep := range eps {
		require.Len(t, ep.Steps, 2)
		assert.Equal(t, rollout.EndStepLimit, ep.End, "textlab ended it at its limit: truncated, not done")
		assert.False(t, ep.Done)
	}
	counts := rollout.CountEnds(eps)
	assert.Equal(t, rollout.EndCounts{string(rollout.EndDone): 0, string(rollout.EndStepLimit): 4, string(rollout.EndContext): 0, string(rollout.EndError): 0}, counts)
	assert.Empty(t, rollout.ContextWarning(counts, 2048))

	// a context of 1024 tokens holds the first turns (~500 tokens) and
	// fills within 40 steps (each turn adds its action and observation)
	lc, err := llama.NewContext(m, llama.ContextParams{NSeqMax: 4, NCtx: 1024, Threads: 1})
	require.NoError(t, err)
	defer lc.Close()
	small := testutil.RollerOn(t, lc, nil, func(c *rollout.Config, _ *rollout.Options) { c.StepLimit = 40 })
	eps, _, err = small.Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	n := 0
	for _, ep := range eps {
		if ep.End == rollout.EndContext {
			n++
			require.Greater(t, len(ep.Steps), 1, "the first turns fitted")
			last := ep.Steps[len(ep.Steps)-1]
			assert.LessOrEqual(t, len(last.Prompt)+8, lc.NCtxSeq(), "the turns played fitted")
			assert.Less(t, len(ep.Steps), 40)
		}
	}
	counts = rollout.CountEnds(eps)
	assert.Equal(t, n, counts[string(rollout.EndContext)])
	assert.Equal(t, 4, counts.Total())
	require.Greater(t, 2*n, 4, "most episodes of the untrained model end on the full context: %v", counts)
	w := rollout.ContextWarning(counts, lc.NCtxSeq())
	assert.Contains(t, w, fmt.Sprintf("%d of 4 episodes ended on a full context (%d tokens)", n, lc.NCtxSeq()))
	assert.Contains(t, w, "correct_invalid")
	assert.Contains(t, rollout.ContextWarning(rollout.EndCounts{string(rollout.EndContext): 3, string(rollout.EndDone): 1}, 512), "3 of 4")
	assert.Empty(t, rollout.ContextWarning(rollout.EndCounts{string(rollout.EndContext): 2, string(rollout.EndDone): 2}, 512), "half is not most")
}

// TestEndError: an environment whose simulator dies mid-episode ends that
// episode with "error" (the others play on), and the pool replaces the
// dead instance, so that the next episodes run on a new one.
func TestEndError(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	dyingMade.Store(0)
	pool, err := environments.NewPool("textlab-dying", environments.Options{}, 2)
	require.NoError(t, err)
	defer pool.Close()
	r := testutil.Roller(t, m, 2, nil, func(_ *rollout.Config, o *rollout.Options) { o.Env, o.Pool = "textlab-dying", pool })
	eps, _, err := r.Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	counts := rollout.CountEnds(eps)
	require.Equal(t, 1, counts[string(rollout.EndError)], "%v", counts)
	for _, ep := range eps {
		if ep.End == rollout.EndError {
			assert.Len(t, ep.Steps, 1, "the step that failed is not recorded")
			assert.Contains(t, ep.Err, "JVM exited")
			assert.False(t, ep.Success)
		} else {
			assert.NotEmpty(t, ep.Steps)
		}
	}
	assert.Equal(t, int32(3), dyingMade.Load(), "the dead instance was replaced")
	assert.Equal(t, 2, pool.Size())
	again, _, err := r.Run(ctx, testutil.Jobs(4, false))
	require.NoError(t, err)
	assert.Zero(t, rollout.CountEnds(again)[string(rollout.EndError)], "the new instance works")
	for _, ep := range again {
		assert.False(t, strings.Contains(ep.Err, "exited"))
	}
}
