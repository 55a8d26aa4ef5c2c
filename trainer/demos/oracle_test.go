package demos

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
)

// TestOracleTipsAreTrue: the oracle tip of a trajectory is what Tip writes
// for the demo it came from (gold and explore), and textlab's tip checker
// finds every oracle tip true — of demos, of failed attempts and of
// deviating attempts (random actions: moves, looks, wrong focuses).
func TestOracleTipsAreTrue(t *testing.T) {
	ctx := context.Background()
	chk := environments.TipCheckerOf(textlab.Name)
	require.NotNil(t, chk)
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(4, 5))
	n := 0
	check := func(d Demo, same bool) {
		t.Helper()
		tip := TrajectoryTip(d.Trajectory())
		if same {
			require.Equal(t, Tip(d), tip, "%s %s/%d", d.Kind, d.Task, d.Variation)
		}
		v := chk.CheckTip(tip, d.Trajectory())
		require.True(t, v.True(), "%s/%d: %q: %+v", d.Task, d.Variation, tip, v)
		n++
	}
	for _, task := range []string{"find-living-thing", "melt", "light-bulb"} {
		for v := range 6 {
			for _, kind := range []Kind{KindGold, KindExplore} {
				var d Demo
				if kind == KindGold {
					d, err = Gold(ctx, env, "textlab", task, v, 0)
				} else {
					d, err = Explore(ctx, env, "textlab", task, v, 0)
				}
				require.NoError(t, err)
				check(d, true)
				f, err := FailedAttempt(ctx, env, d, rng.IntN(len(d.Steps)), 1+rng.IntN(20), 0, rng)
				require.NoError(t, err)
				if len(f.Steps) > 0 {
					check(f, false)
				}
				g, err := DeviatingAttempt(ctx, env, d, rng.IntN(len(d.Steps)), 1+rng.IntN(20), 0, rng)
				require.NoError(t, err)
				check(g, false)
			}
		}
	}
	t.Logf("%d oracle tips checked", n)
}
