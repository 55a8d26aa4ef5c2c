package demos

import (
	"bufio"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/trainer/rollout"
)

// Every key of RunConfig is documented, and the file and overrides apply
// in order.
func TestRunConfigLoad(t *testing.T) {
	assert.Empty(t, runSchema.Undocumented())
	file := filepath.Join(t.TempDir(), "d.yaml")
	require.NoError(t, os.WriteFile(file, []byte("env: textlab\ntasks: [melt]\nkind: explore\nprompt:\n  history: last-k\n"), 0o644))
	c, err := LoadRunConfig(file, []string{"variations=2", "kind=gold"})
	require.NoError(t, err)
	assert.Equal(t, "textlab", c.Env)
	assert.Equal(t, []string{"melt"}, c.Tasks)
	assert.Equal(t, KindGold, c.Kind)
	assert.Equal(t, 2, c.Variations)
	assert.Equal(t, rollout.HistoryLast, c.Prompt.History)
	_, err = LoadRunConfig(file, []string{"nope=1"})
	assert.ErrorIs(t, err, ErrRunConfig)
	var b strings.Builder
	require.NoError(t, PrintRunConfig(&b, DefaultRunConfig()))
	assert.Contains(t, b.String(), "tip_records: 0")
}

// Validate names the key of every bad value before anything is opened.
func TestRunConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		set  func(*RunConfig)
		want string
	}{
		{func(c *RunConfig) { c.Env = "" }, "env is required"},
		{func(c *RunConfig) { c.Out = "" }, "out is required"},
		{func(c *RunConfig) { c.Split = "nope" }, "unknown split"},
		{func(c *RunConfig) { c.Kind = "nope" }, `kind "nope"`},
		{func(c *RunConfig) { c.Kind = KindExplore; c.Tour = "spiral" }, `tour "spiral": want doors, random or random-direct`},
		{func(c *RunConfig) { c.Tour = TourRandom }, "tour random orders explore demos' room search: give kind explore"},
		{func(c *RunConfig) { c.Prompt.History = rollout.HistoryLast }, "set per_step"},
		{func(c *RunConfig) { c.Variations = -1 }, "variations -1 is negative"},
		{func(c *RunConfig) { c.SkipVariations = -1 }, "skip_variations -1 is negative"},
		{func(c *RunConfig) { c.AttemptTips = -1 }, "attempt_tips -1 is negative"},
		{func(c *RunConfig) { c.TipRecords = 2; c.TopK = 0 }, "top-k 0: want at least 1"},
		{func(c *RunConfig) { c.FailureTips = true }, "failure tips need tip records"},
	} {
		c := DefaultRunConfig()
		c.Env, c.Out = "textlab", "d.jsonl"
		tc.set(&c)
		err := c.Validate()
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
	c := DefaultRunConfig()
	c.Env, c.Out = "textlab", "d.jsonl"
	assert.NoError(t, c.Validate())
}

// Run writes what the records of each played demo are, in order, and the
// text corpus; a task past its split's end is refused up front.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	c := DefaultRunConfig()
	c.Env, c.Tasks, c.Variations, c.Kind = "textlab", []string{"melt"}, 1, KindExplore
	c.EnvOptions.Simplifications = "easy"
	c.Out, c.Text = filepath.Join(dir, "d.jsonl"), filepath.Join(dir, "t.txt")
	var planned int
	c.Plan = func(tasks, variations int) { planned = tasks * variations }
	res, err := Run(context.Background(), c)
	require.NoError(t, err)
	assert.Equal(t, 1, planned)
	assert.Equal(t, 1, res.Episodes)
	assert.Equal(t, 1, res.Records)
	f, err := os.Open(c.Out)
	require.NoError(t, err)
	defer f.Close()
	var lines int
	for s := bufio.NewScanner(f); s.Scan(); {
		lines++
	}
	assert.Equal(t, 1, lines)
	text, err := os.ReadFile(c.Text)
	require.NoError(t, err)
	assert.NotEmpty(t, text)

	c.Out, c.Text, c.SkipVariations = filepath.Join(dir, "e.jsonl"), filepath.Join(dir, "e.txt"), 1000
	_, err = Run(context.Background(), c)
	require.ErrorContains(t, err, "leaves no variation to play")
	_, err = os.Stat(c.Out)
	assert.True(t, os.IsNotExist(err))
}

// PickTasks keeps the named order, or takes every task not held out
// (held-out ones too when asked).
func TestPickTasksOrder(t *testing.T) {
	all, err := textlab.Tasks(environments.Options{})
	require.NoError(t, err)
	got, err := PickTasks(all, []string{all[1].Name, all[0].Name}, false)
	require.NoError(t, err)
	assert.Equal(t, []string{all[1].Name, all[0].Name}, []string{got[0].Name, got[1].Name})
	_, err = PickTasks(all, []string{"nope"}, false)
	assert.Error(t, err)
	every, err := PickTasks(all, nil, true)
	require.NoError(t, err)
	assert.Len(t, every, len(all))
	open, err := PickTasks(all, nil, false)
	require.NoError(t, err)
	for _, tk := range open {
		assert.False(t, tk.HeldOut)
	}
}

// oddEnv is textlab whose even variations start the way ScienceWorld's
// outside does ("This outside location is called the …") and whose odd
// variations name no room at all.
type oddEnv struct{ *textlab.Env }

func (e oddEnv) Reset(ctx context.Context, task string, variation int, seed int64) (environments.ResetResult, error) {
	r, err := e.Env.Reset(ctx, task, variation, seed)
	if variation%2 == 0 {
		r.Observation = strings.Replace(r.Observation, "This room is called the ", "This outside location is called the ", 1)
	} else {
		r.Observation = "You are somewhere odd.\n" + strings.Replace(r.Observation, "This room is called the ", "Here is the ", 1)
	}
	return r, err
}

func init() {
	environments.Register(environments.Spec{
		Name: "textlab-odd", Description: "textlab with odd first observations (demos tests)",
		New: func(o environments.Options) (environments.Env, error) {
			e, err := textlab.New(o)
			return oddEnv{e}, err
		},
		Tasks: textlab.Tasks,
	})
}

// Explore demos (issue 38 §6): a first observation of ScienceWorld's
// outside is a room like any other; a variation whose first observation
// names no room is skipped with a warning naming it, not the end of the
// whole demo file.
func TestRunSkipsOddVariation(t *testing.T) {
	dir := t.TempDir()
	c := DefaultRunConfig()
	c.Env, c.Tasks, c.Variations, c.Kind = "textlab-odd", []string{"melt"}, 4, KindExplore
	c.EnvOptions.Simplifications = "easy"
	c.Out = filepath.Join(dir, "d.jsonl")
	var warns []string
	c.Warn = func(s string) { warns = append(warns, s) }
	res, err := Run(context.Background(), c)
	require.NoError(t, err)
	assert.Equal(t, 2, res.Episodes, "the two even (outside) variations")
	assert.Equal(t, 2, res.Skipped, "the two odd ones")
	require.Len(t, warns, 2)
	for _, w := range warns {
		assert.Regexp(t, `skipped: task melt variation \d+: .*explore demos need .*"You are somewhere odd\."`, w)
	}
}

var updateDoc = flag.Bool("update-doc", false, "rewrite the configuration table of docs/sft.md")

// The configuration table of docs/sft.md is RunConfig's.
func TestRunConfigDocsMatch(t *testing.T) {
	assert.Empty(t, runSchema.Undocumented(), "keys without a doc tag")
	require.NoError(t, runSchema.DocTable(filepath.Join("..", "..", "docs", "sft.md"), "demos-config-reference", *updateDoc))
}
