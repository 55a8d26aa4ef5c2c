package trainer

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

// `eval --run DIR` evaluates what the run trained: its model, environment,
// tasks (a task/N of training stands for the task), context, rollout and
// memory sections and memory are the defaults; a file and --set still
// change any key (0 included), and eval's own protocol keeps its defaults.
func TestLoadEvalConfigTakesTheRun(t *testing.T) {
	dir := t.TempDir()
	run := DefaultConfig()
	run.Model, run.Env, run.Tasks, run.Context = "m.gguf", "textlab", []string{"melt/3", "melt/4", "light-bulb"}, 1024
	run.Rollout.Prompt.History, run.Rollout.Prompt.HistoryK, run.Rollout.SuccessScore = rollout.HistoryLast, 2, 71
	run.Memory.Threshold, run.Memory.TopK = 0.3, 4
	run.EnvOptions.Simplifications = "easy"
	var buf bytes.Buffer
	require.NoError(t, PrintConfig(&buf, run))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), buf.Bytes(), 0o644))

	c, err := LoadEvalConfig("", []string{"run=" + dir})
	require.NoError(t, err)
	assert.Equal(t, dir, c.Run)
	assert.Equal(t, "m.gguf", c.Model)
	assert.Equal(t, []string{"melt", "light-bulb"}, c.Tasks)
	assert.Equal(t, 1024, c.Context)
	assert.Equal(t, "easy", c.EnvOptions.Simplifications)
	assert.Equal(t, run.Rollout, c.Rollout)
	assert.Equal(t, run.Memory, c.Memory)
	assert.Equal(t, filepath.Join(dir, MemoryFile), c.MemoryDB)
	def := evaluate.DefaultRunConfig()
	assert.Equal(t, def.Eval, c.Eval, "the evaluation protocol is eval's own")

	file := filepath.Join(t.TempDir(), "eval.yaml")
	require.NoError(t, os.WriteFile(file, []byte("run: "+dir+"\ntasks: [use-thermometer]\n"), 0o644))
	c, err = LoadEvalConfig(file, []string{"memory.threshold=0", "context=512"})
	require.NoError(t, err)
	assert.Equal(t, []string{"use-thermometer"}, c.Tasks)
	assert.Equal(t, 0.0, c.Memory.Threshold, "0 can be asked for")
	assert.Equal(t, 512, c.Context)
	assert.Equal(t, 4, c.Memory.TopK)

	c, err = LoadEvalConfig("", []string{"run=" + dir, "ood=true"})
	require.NoError(t, err)
	assert.Empty(t, c.Tasks, "ood plays the held-out tasks, not the run's")

	_, err = LoadEvalConfig("", []string{"run=" + t.TempDir()})
	assert.ErrorIs(t, err, ErrNoRun)
}
