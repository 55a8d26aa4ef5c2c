package evaluate

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/trainer/internal/testutil"
)

// constructed counts the instances of "textlab-counted" made.
var constructed atomic.Int64

func init() {
	environments.Register(environments.Spec{
		Name: "textlab-counted", Description: "textlab counting its instances (eval tests)",
		New: func(o environments.Options) (environments.Env, error) {
			constructed.Add(1)
			return textlab.New(o)
		},
		Tasks: textlab.Tasks,
	})
}

// Eval reuses a pool of parallel instances, as training does (issue 38 §6:
// `eval` started a new ScienceWorld JVM per episode).
func TestRunReusesEnvPool(t *testing.T) {
	cfg := DefaultRunConfig()
	cfg.Model, cfg.Env, cfg.Tasks = testutil.ModelFile(t), "textlab-counted", []string{"melt"}
	cfg.Eval.Episodes, cfg.Eval.MaxVariations, cfg.Parallel, cfg.Threads = 3, 2, 2, 1
	cfg.Rollout.Prompt.MaxActionTokens, cfg.Rollout.StepLimit = 6, 2
	constructed.Store(0)
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, 6, res.Report.MemoryOff.Episodes)
	assert.Equal(t, int64(2), constructed.Load(), "one instance per episode in play (parallel 2), not one per episode (6)")
}

// A memory holding no tips for the evaluated variations is a warning (issue
// 38 §6: memory on = off without a word); one holding some is not.
func TestMemoryCoverageWarning(t *testing.T) {
	tasks, err := textlab.Tasks(environments.Options{})
	require.NoError(t, err)
	var melt []environments.Task
	for _, tk := range tasks {
		if tk.Name == "melt" {
			melt = append(melt, tk)
		}
	}
	require.Len(t, melt, 1)
	cfg := DefaultRunConfig()
	cfg.MemoryDB = "m.db"
	test, err := melt[0].VariationsIn(environments.Test)
	require.NoError(t, err)
	train, err := melt[0].VariationsIn(environments.Train)
	require.NoError(t, err)
	w := memoryCoverage(melt, cfg, []string{"melt/" + itoa(train[0])})
	assert.Contains(t, w, "the memory m.db holds no tips for any of the")
	assert.Contains(t, w, "test variations")
	assert.Contains(t, w, "--split train")
	assert.Empty(t, memoryCoverage(melt, cfg, []string{"melt/" + itoa(test[0])}))
}

func itoa(n int) string { return strconv.Itoa(n) }
