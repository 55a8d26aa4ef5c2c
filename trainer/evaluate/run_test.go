package evaluate

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the configuration table of docs/eval.md")

// TestRunConfigDocsMatch: every key of `empo2 eval`'s configuration is
// documented by its doc tag, and docs/eval.md's table is
// RunConfigReference verbatim.
func TestRunConfigDocsMatch(t *testing.T) {
	assert.Empty(t, runSchema.Undocumented(), "keys without a doc tag")
	require.NoError(t, runSchema.DocTable(filepath.Join("..", "..", "docs", "eval.md"), "eval-config-reference", *updateDoc))
}

// Every value of a key can be asked for, 0 included: a file and --set
// decode strictly (an unknown key names itself and its line), and
// Validate refuses what has no meaning, naming the key and the value.
func TestRunConfigValidate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "eval.yaml")
	require.NoError(t, os.WriteFile(file, []byte("model: m.gguf\neval:\n  temperature: 0\n  split: dev\nmemory:\n  threshold: 0\n"), 0o644))
	c, err := LoadRunConfig(file, []string{"tasks=[melt, light-bulb]", "rollout.system=You are an agent, act well."})
	require.NoError(t, err)
	assert.Equal(t, 0.0, c.Eval.Temperature)
	assert.Equal(t, 0.0, c.Memory.Threshold)
	assert.Equal(t, []string{"melt", "light-bulb"}, c.Tasks)
	assert.Equal(t, "You are an agent, act well.", c.Rollout.Prompt.System)
	require.NoError(t, c.Validate())

	require.NoError(t, os.WriteFile(file, []byte("model: m.gguf\neval:\n  temprature: 0\n"), 0o644))
	_, err = LoadRunConfig(file, nil)
	require.ErrorIs(t, err, ErrRunConfig)
	assert.Contains(t, err.Error(), "temprature")
	assert.Contains(t, err.Error(), "line 3")

	for _, tc := range []struct {
		set, want string
	}{
		{"checkpoint=-1", `checkpoint "-1": want latest, base or a step number`},
		{"rollout.success_score=.nan", "rollout.success_score = .nan is not a finite number"},
		{"trials=1000000000", "trials 1000000000: want 1..1000"},
		{"eval.temperature=-1", "eval.temperature -1"},
		{"memory.threshold=1.5", "memory.threshold 1.5"},
		{"eval.memory=sometimes", `eval.memory "sometimes"`},
		{"context=8", "context 8"},
		{"parallel=0", "parallel 0"},
		{"context=1000000000", "context (--ctx) 1000000000: want 0 (the model's) or 16..8388608 tokens per episode with parallel 8"},
		{"rollout.max_action_tokens=1000000000", "rollout.max_action_tokens (--max-action-tokens) 1000000000: want 1..65536"},
		{"env_options.step_limit=-5", "env_options.step_limit -5"},
	} {
		c, err := LoadRunConfig("", []string{"model=m.gguf", "run=r", tc.set})
		if err == nil { // a number that is not finite is refused when decoded
			err = c.Validate()
		}
		require.ErrorIs(t, err, ErrRunConfig, tc.set)
		assert.Contains(t, err.Error(), tc.want, tc.set)
	}
	c, err = LoadRunConfig("", []string{"model=m.gguf", "run=r", "checkpoint=7"})
	require.NoError(t, err)
	n, err := c.checkpointStep()
	require.NoError(t, err)
	assert.Equal(t, 7, n)
}

// The plan's line names the tasks, variations, episodes and settings.
func TestPlanString(t *testing.T) {
	p := Plan{Split: "test", Tasks: []string{"melt"}, Variations: 2, Episodes: 1, Settings: []MemorySetting{MemoryOff, MemoryOn}, Total: 4}
	assert.Equal(t, "melt: 2 test variations × 1 episode × 2 settings (off, on) = 4 episodes", p.String())
	p = Plan{Split: "test", Tasks: []string{"boil", "freeze"}, Variations: 4, Episodes: 1, Trials: 3, Settings: []MemorySetting{MemoryOn, MemoryOff}, Total: 24}
	assert.True(t, strings.HasPrefix(p.String(), "boil, freeze: 4 test variations × 3 trials × 2 settings (on, off) = 24 episodes"), p.String())
}

// One success rule: an episode succeeds when its final score reaches the
// roller's rollout.success_score, in the episodes and in eval's rates
// (recomputed here from the scores); another threshold changes the
// successes of the very same episodes, nothing else.
func TestSuccessIsTheRollersRule(t *testing.T) {
	ctx := context.Background()
	m := testutil.Model(t)
	var reps []*Report
	for _, s := range []float64{100, -1} {
		r := testutil.Roller(t, m, 3, nil, func(c *rollout.Config, _ *rollout.Options) { c.SuccessScore = s })
		rep, err := Evaluate(ctx, r, evalCfg())
		require.NoError(t, err)
		n := 0
		for _, ep := range rep.OffEpisodes {
			assert.Equal(t, ep.Score >= s, ep.Success, "score %v, success_score %v", ep.Score, s)
			if ep.Score >= s {
				n++
			}
		}
		assert.InDelta(t, float64(n)/float64(len(rep.OffEpisodes)), rep.MemoryOff.SuccessRate, 1e-12)
		reps = append(reps, rep)
	}
	assert.Equal(t, reps[0].MemoryOff.ScoreMean, reps[1].MemoryOff.ScoreMean, "the threshold changes no episode")
	assert.Greater(t, reps[1].MemoryOff.SuccessRate, reps[0].MemoryOff.SuccessRate, "success_score -1: every score of textlab (0..100) succeeds")
}
