package scienceworld

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
)

// realEnv starts the real simulator, or skips when SCIENCEWORLD_JAR is unset.
func realEnv(t testing.TB, opts environments.Options) *Env {
	t.Helper()
	jar := os.Getenv(JarEnv)
	if jar == "" {
		t.Skip("SCIENCEWORLD_JAR is not set: the real-simulator test needs the ScienceWorld jar (see docs/environments.md)")
	}
	opts.Jar = jar
	e, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestRealSimulator runs only with SCIENCEWORLD_JAR set: the local task
// table must match the jar, and the gold path of power-component
// variation 0 must reach 100 through the Go bridge.
func TestRealSimulator(t *testing.T) {
	e := realEnv(t, environments.Options{StepLimit: 100})
	names, err := e.TaskNames(bg)
	require.NoError(t, err)
	want := make([]string, len(taskTable))
	for i, tk := range taskTable {
		want[i] = tk.name
	}
	require.ElementsMatch(t, want, names, "the jar's task names")
	for _, tk := range taskTable {
		n, err := e.MaxVariations(bg, tk.name)
		require.NoError(t, err)
		require.Equal(t, tk.variations, n, "variations of %s", tk.name)
	}
	simps, err := e.PossibleSimplifications(bg)
	require.NoError(t, err)
	require.ElementsMatch(t, Simplifications, simps)

	gold, err := e.GoldActions(bg, "power-component", 0)
	require.NoError(t, err)
	require.NotEmpty(t, gold)
	res, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	require.Contains(t, res.Observation, "This room is called")
	require.Contains(t, res.TaskDescription, "Your task is to")
	va, err := e.ValidActions(bg)
	require.NoError(t, err)
	require.Contains(t, va, "look around")
	for _, tr := range []environments.Split{environments.Train, environments.Dev, environments.Test} {
		got, err := e.Split(bg, tr)
		require.NoError(t, err)
		tasks, _ := Tasks(environments.Options{})
		tk, _ := environments.FindTask(tasks, "power-component")
		want, _ := tk.VariationsIn(tr)
		require.Equal(t, want, got, "split %s computed locally = the simulator's", tr)
	}
	start := time.Now()
	var r environments.StepResult
	for i, a := range gold {
		r, err = e.Step(bg, a)
		require.NoError(t, err, "gold step %d %q", i, a)
		if r.Done {
			break
		}
	}
	t.Logf("gold path: %d actions in %s", len(gold), time.Since(start))
	require.Equal(t, 100.0, e.Score())
	require.True(t, r.Done)
	require.Equal(t, true, r.Info["completed"])

	// The EMPO² recipe's preset: the gold path under "easy" reaches 100 too.
	easy := realEnv(t, environments.Options{Simplifications: "easy", StepLimit: 100})
	gold, err = easy.GoldActions(bg, "power-component", 0)
	require.NoError(t, err)
	_, err = easy.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	for i, a := range gold {
		r, err = easy.Step(bg, a)
		require.NoError(t, err, "easy gold step %d %q", i, a)
		if r.Done {
			break
		}
	}
	require.Equal(t, 100.0, easy.Score())
}
