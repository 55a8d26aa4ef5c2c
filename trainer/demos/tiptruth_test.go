package demos

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
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

// AttemptTipRecords: each record is the tip request after an attempt
// (FailedAttempt: the demo's prefix, then random actions), answered with
// that attempt's true tip; replaying the record's actions on a fresh environment gives its
// observations and the same tip; the records are deterministic, cover
// failures and unfinished attempts, and respect the step limit.
func TestAttemptTipRecords(t *testing.T) {
	ctx := context.Background()
	opts := environments.Options{Simplifications: "easy"}
	env, err := textlab.New(opts)
	require.NoError(t, err)
	replay, err := textlab.New(opts)
	require.NoError(t, err)
	pc := rollout.DefaultPromptConfig()
	chk := environments.TipCheckerOf(textlab.Name)
	var failed, unfinished int
	for v := 8; v < 12; v++ {
		d, err := Explore(ctx, env, "textlab", "find-living-thing", v, 0)
		require.NoError(t, err)
		recs, err := AttemptTipRecords(ctx, env, d, 6, 30, pc, 5)
		require.NoError(t, err)
		again, err := AttemptTipRecords(ctx, env, d, 6, 30, pc, 5)
		require.NoError(t, err)
		require.Equal(t, recs, again, "not deterministic")
		require.Len(t, recs, 6)
		for _, r := range recs {
			msgs := r.Messages
			require.Equal(t, true, r.Meta["attempt"])
			require.True(t, strings.HasSuffix(msgs[len(msgs)-2].Content, rollout.TipRequest))
			// the turns: user (task + first observation), then assistant action / user observation pairs
			var acts []string
			for i := 2; i+1 < len(msgs)-1; i += 2 {
				require.Equal(t, sft.RoleAssistant, msgs[i].Role)
				require.True(t, r.IsContext(i), "the attempt's action %d is context, not trained", i)
				acts = append(acts, msgs[i].Content)
			}
			require.False(t, r.IsContext(len(msgs)-1), "the tip is trained")
			require.NoError(t, r.Check())
			require.LessOrEqual(t, len(acts), 30)
			p, err := Play(ctx, replay, "textlab", d.Task, v, 0, acts)
			require.NoError(t, err)
			p.Kind = d.Kind
			require.Len(t, p.Steps, len(acts))
			require.Equal(t, rollout.TipMessages(pc, p.Desc, p.FirstObs, p.Turns()), msgs[:len(msgs)-1])
			tip := msgs[len(msgs)-1].Content
			require.Equal(t, Tip(p), tip)
			require.True(t, chk.CheckTip(tip, p.Trajectory()).True(), tip)
			switch {
			case p.Score < 0:
				failed++
			case p.Score < 100:
				unfinished++
			}
		}
	}
	require.Positive(t, failed)
	require.Positive(t, unfinished)
	recs, err := AttemptTipRecords(ctx, env, Demo{}, 3, 30, pc, 0)
	require.NoError(t, err)
	require.Empty(t, recs)
	_, err = AttemptTipRecords(ctx, env, Demo{}, 3, 0, pc, 0)
	require.Error(t, err)
}
