package demos

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
)

// Every tip Tip writes for textlab is true, checked by textlab's
// TipChecker, which recomputes the facts from the observations alone: the
// gold and explore demos of every training variation of every task, and
// failed attempts at each (a demo prefix, then random actions).
func TestTipsAreTrue(t *testing.T) {
	ctx := context.Background()
	tasks, err := textlab.Tasks(environments.Options{})
	require.NoError(t, err)
	chk := environments.TipCheckerOf(textlab.Name)
	require.NotNil(t, chk)
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	n := 0
	check := func(d Demo) {
		t.Helper()
		tip := Tip(d)
		v := chk.CheckTip(tip, d.Trajectory())
		require.True(t, v.True(), "%s %s/%d: %q: %+v", d.Kind, d.Task, d.Variation, tip, v)
		n++
	}
	for _, tk := range tasks {
		for _, v := range tk.Train {
			for _, kind := range []Kind{KindGold, KindExplore} {
				var d Demo
				if kind == KindGold {
					d, err = Gold(ctx, env, "textlab", tk.Name, v, 0)
				} else {
					d, err = Explore(ctx, env, "textlab", tk.Name, v, 0)
				}
				require.NoError(t, err)
				check(d)
				f, err := FailedAttempt(ctx, env, d, rng.IntN(len(d.Steps)), 1+rng.IntN(tk.StepLimit), 0, rng)
				require.NoError(t, err)
				if len(f.Steps) > 0 {
					check(f)
				}
			}
		}
	}
	t.Logf("%d tips checked", n)
}
