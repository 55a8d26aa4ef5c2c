package demos

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	_ "github.com/empo2/empo2/environments/webshop" // registers "webshop"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// Every training variation's demo (gold, and explore under "easy"),
// replayed action by action through a fresh environment, reaches the gold
// score (100, done); and the demo's recorded observations are what the
// replay sees.
func TestDemosReplayReachGoldScore(t *testing.T) {
	ctx := context.Background()
	tasks, err := textlab.Tasks(environments.Options{})
	require.NoError(t, err)
	for _, kind := range []Kind{KindGold, KindExplore} {
		opts := environments.Options{}
		if kind == KindExplore {
			opts.Simplifications = "easy"
		}
		env, err := textlab.New(opts)
		require.NoError(t, err)
		replay, err := textlab.New(opts)
		require.NoError(t, err)
		for _, tk := range tasks {
			for _, v := range append(append([]int(nil), tk.Train...), tk.TestVars...) {
				var d Demo
				if kind == KindGold {
					d, err = Gold(ctx, env, "textlab", tk.Name, v, 0)
				} else {
					d, err = Explore(ctx, env, "textlab", tk.Name, v, 0)
				}
				require.NoError(t, err, "%s %s/%d", kind, tk.Name, v)
				r, err := Play(ctx, replay, "textlab", tk.Name, v, 0, d.Actions())
				require.NoError(t, err)
				require.True(t, r.Done, "%s %s/%d", kind, tk.Name, v)
				require.Equal(t, 100.0, r.Score, "%s %s/%d: %q", kind, tk.Name, v, d.Actions())
				require.Equal(t, len(d.Steps), len(r.Steps))
				for i := range d.Steps {
					require.Equal(t, d.Steps[i].Observation, r.Steps[i].Observation)
				}
			}
		}
	}
}

// Explore demos only act on what was observed: two variations whose
// observations agree up to a step take the same action at that step (so a
// deterministic policy can imitate all of them). Gold demos do not have
// this property (they walk straight to hidden objects).
func TestExploreDemosAreObservable(t *testing.T) {
	ctx := context.Background()
	tasks, err := textlab.Tasks(environments.Options{})
	require.NoError(t, err)
	conflicts := func(kind Kind) int {
		env, err := textlab.New(environments.Options{Simplifications: "easy"})
		require.NoError(t, err)
		next := map[string]string{} // observable history → action
		n := 0
		for _, tk := range tasks {
			for _, v := range tk.Train {
				var d Demo
				if kind == KindGold {
					d, err = Gold(ctx, env, "textlab", tk.Name, v, 0)
				} else {
					d, err = Explore(ctx, env, "textlab", tk.Name, v, 0)
				}
				require.NoError(t, err)
				h := tk.Name + "\x00" + d.Desc + "\x00" + d.FirstObs
				for _, s := range d.Steps {
					if a, ok := next[h]; ok && a != s.Action {
						n++
						break
					} else if !ok {
						next[h] = s.Action
					}
					h += "\x00" + s.Action + "\x00" + s.Observation
				}
			}
		}
		return n
	}
	assert.Zero(t, conflicts(KindExplore))
	assert.Greater(t, conflicts(KindGold), 100)
}

// A packed demo record tokenizes exactly as the rollouts render the same
// trajectory: at every step the rollout prompt (rollout.Messages of the turns so
// far, with the generation prompt) is a prefix of the record's tokens and
// the step's assistant span starts right after it; the span holds the
// action's tokens and the end-of-turn token. The tip turn's prompt is
// rollout.TipMessages, as the rollouts ask for tips.
func TestDemoTokensMatchRollout(t *testing.T) {
	m := testutil.Model(t)
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	for _, pc := range []rollout.PromptConfig{rollout.DefaultPromptConfig(), {ActionFormat: rollout.FormatCoT}} {
		pc, err := pc.Normalize()
		require.NoError(t, err)
		r, err := rollout.NewRenderer(m, pc)
		require.NoError(t, err)
		d, err := Explore(ctx, env, "textlab", "melt", 0, 0)
		require.NoError(t, err)
		recs, err := Records(d, Config{Prompt: pc})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		ct, err := r.Tokens(recs[0].Messages, false)
		require.NoError(t, err)
		require.Len(t, ct.Assistant, len(d.Steps)+1) // every action + the tip
		turns := d.Turns()
		for i := range turns {
			if pc.ActionFormat == rollout.FormatCoT {
				turns[i].Action = rollout.ActionOpen + turns[i].Action + rollout.ActionClose
			}
		}
		eot := r.EndOfTurn()
		for i := range d.Steps {
			p, err := r.Tokens(rollout.Messages(pc, d.Desc, d.FirstObs, turns[:i], ""), true)
			require.NoError(t, err)
			require.Equal(t, p.Tokens, ct.Tokens[:len(p.Tokens)], "step %d prompt", i)
			sp := ct.Assistant[i]
			require.Equal(t, len(p.Tokens), sp[0], "step %d span start", i)
			resp, err := m.Tokenize(turns[i].Action, false, false)
			require.NoError(t, err)
			require.Equal(t, append(resp, eot), ct.Tokens[sp[0]:sp[1]], "step %d response", i)
			a, ok := rollout.ParseAction(pc, turns[i].Action)
			require.True(t, ok)
			require.Equal(t, d.Steps[i].Action, a)
		}
		tp, err := r.Tokens(rollout.TipMessages(pc, d.Desc, d.FirstObs, turns), true)
		require.NoError(t, err)
		require.Equal(t, tp.Tokens, ct.Tokens[:len(tp.Tokens)])
		require.Equal(t, len(tp.Tokens), ct.Assistant[len(d.Steps)][0])
	}

	// per-step records: record i is the rollout prompt of step i + the action
	r, err := rollout.NewRenderer(m, rollout.PromptConfig{History: rollout.HistoryLast, HistoryK: 2})
	require.NoError(t, err)
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 1, 0)
	require.NoError(t, err)
	pc := r.Config()
	_, err = Records(d, Config{Prompt: pc})
	require.ErrorIs(t, err, rollout.ErrPrompt, "last-k history cannot be packed")
	recs, err := Records(d, Config{Prompt: pc, PerStep: true})
	require.NoError(t, err)
	require.Len(t, recs, len(d.Steps)+1)
	for i := range d.Steps {
		ct, err := r.Tokens(recs[i].Messages, false)
		require.NoError(t, err)
		p, err := r.Tokens(rollout.Messages(pc, d.Desc, d.FirstObs, d.Turns()[:i], ""), true)
		require.NoError(t, err)
		require.Equal(t, p.Tokens, ct.Tokens[:len(p.Tokens)])
		require.Len(t, ct.Assistant, min(i, pc.HistoryK)+1)
	}
	assert.Equal(t, true, recs[len(recs)-1].Meta["tip"])
}

func TestDemoTip(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 0, 0)
	require.NoError(t, err)
	tip := Tip(d)
	// what was tried (rooms looked at), what was found where and which
	// steps earned score, how far from done
	focus := ""
	for _, s := range d.Steps {
		if strings.HasPrefix(s.Action, "focus on ") {
			focus = s.Action + " in the " + s.Room
		}
	}
	require.NotEmpty(t, focus)
	assert.Contains(t, tip, "I looked around the ")
	assert.Contains(t, tip, focus)
	assert.Contains(t, tip, "Score came from ")
	assert.True(t, strings.HasSuffix(tip, "The task is complete."), tip)
	assert.NotRegexp(t, `\(\+|/100`, tip, "no point values, no score: the chat does not show them")
	assert.Equal(t, rollout.CleanTip(tip), tip)
	assert.LessOrEqual(t, len(strings.Fields(tip)), rollout.MaxTipWords)

	// an unfinished episode says how far it got
	cut := d
	cut.Steps = d.Steps[:len(d.Steps)-1]
	cut.Done, cut.Score = false, cut.Steps[len(cut.Steps)-1].Score
	assert.True(t, strings.HasSuffix(Tip(cut), "The task is not complete."), Tip(cut))

	recs, err := Records(d, Config{Prompt: rollout.DefaultPromptConfig()})
	require.NoError(t, err)
	msgs := recs[0].Messages
	assert.Equal(t, llama.Message{Role: sft.RoleAssistant, Content: tip}, msgs[len(msgs)-1])
	assert.True(t, strings.HasSuffix(msgs[len(msgs)-2].Content, rollout.TipRequest))
	noTips, err := Records(d, Config{Prompt: rollout.DefaultPromptConfig(), NoTips: true})
	require.NoError(t, err)
	last := noTips[0].Messages[len(noTips[0].Messages)-1]
	assert.Equal(t, sft.RoleAssistant, last.Role)
	assert.Equal(t, d.Steps[len(d.Steps)-1].Action, last.Content)
}

// WebShop (synthetic catalogue): gold demos replay to their score, and the
// tip, with no rooms to name, lists the actions tried.
func TestWebShopDemos(t *testing.T) {
	ctx := context.Background()
	spec, err := environments.Lookup("webshop")
	require.NoError(t, err)
	tasks, err := spec.Tasks(environments.Options{})
	require.NoError(t, err)
	env, err := spec.New(environments.Options{})
	require.NoError(t, err)
	defer env.Close()
	replay, err := spec.New(environments.Options{})
	require.NoError(t, err)
	defer replay.Close()
	tk := tasks[0]
	for _, v := range tk.Train[:3] {
		d, err := Gold(ctx, env, "webshop", tk.Name, v, 0)
		require.NoError(t, err)
		require.True(t, d.Done)
		r, err := Play(ctx, replay, "webshop", tk.Name, v, 0, d.Actions())
		require.NoError(t, err)
		assert.Equal(t, d.Score, r.Score)
		tip := Tip(d)
		assert.True(t, strings.HasPrefix(tip, "I tried search["), tip)
		recs, err := Records(d, Config{Prompt: rollout.DefaultPromptConfig()})
		require.NoError(t, err)
		require.Len(t, recs, 1)
	}
}

// Random tours (TourRandom) do the same work as the doors tour — every
// find-living-thing train variation ends done at score 100 — but their
// search moves are not a function of the observations: histories that the
// doors tour always continues the same way are continued differently
// (the conflicts TestExploreDemosAreObservable counts), so only a memory
// of the tour can predict it. The same seed gives the same tour; another
// seed another.
func TestExploreRandomTour(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	tk := findLivingThing(t)
	next := map[string]string{}
	conflicts, differs := 0, 0
	for _, v := range tk.Train {
		d, err := ExploreTour(ctx, env, "textlab", tk.Name, v, 0, TourRandom)
		require.NoError(t, err)
		assert.True(t, d.Done, "variation %d", v)
		assert.Equal(t, 100.0, d.Score, "variation %d", v)
		again, err := ExploreTour(ctx, env, "textlab", tk.Name, v, 0, TourRandom)
		require.NoError(t, err)
		assert.Equal(t, d.Actions(), again.Actions(), "seeded")
		other, err := ExploreTour(ctx, env, "textlab", tk.Name, v, 7, TourRandom)
		require.NoError(t, err)
		if strings.Join(other.Actions(), "|") != strings.Join(d.Actions(), "|") {
			differs++
		}
		h := d.Desc + "\x00" + d.FirstObs
		for _, s := range d.Steps {
			if a, ok := next[h]; ok && a != s.Action {
				conflicts++
				break
			} else if !ok {
				next[h] = s.Action
			}
			h += "\x00" + s.Action + "\x00" + s.Observation
		}
		doors, err := ExploreTour(ctx, env, "textlab", tk.Name, v, 0, TourDoors)
		require.NoError(t, err)
		plain, err := Explore(ctx, env, "textlab", tk.Name, v, 0)
		require.NoError(t, err)
		assert.Equal(t, plain.Actions(), doors.Actions(), "Explore is the doors tour")
	}
	assert.Greater(t, conflicts, len(tk.Train)/4, "random tours are not predictable from the observations")
	assert.Greater(t, differs, len(tk.Train)/2, "the seed draws the tour")
}

// TourRandomDirect searches as TourRandom does — the same seed gives the
// same actions up to the first work action (focus), so a named room is
// never reached early, which would tell where the creature is — and after
// the pick-up goes straight to the box's room the task names ("teleport to
// ROOM", then the move), where TourRandom goes on searching whenever it has
// not looked at that room yet. Every find-living-thing train variation
// ends done at score 100, never longer than its random tour.
func TestExploreRandomDirectTour(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	tk := findLivingThing(t)
	boxRoom := regexp.MustCompile(`box in the ([^.]+)\.$`)
	shorter := 0
	for _, v := range tk.Train {
		for _, seed := range []int64{0, 7} {
			d, err := ExploreTour(ctx, env, "textlab", tk.Name, v, seed, TourRandomDirect)
			require.NoError(t, err)
			r, err := ExploreTour(ctx, env, "textlab", tk.Name, v, seed, TourRandom)
			require.NoError(t, err)
			assert.True(t, d.Done, "variation %d", v)
			assert.Equal(t, 100.0, d.Score, "variation %d", v)
			da, ra := d.Actions(), r.Actions()
			focus := slices.IndexFunc(da, func(a string) bool { return strings.HasPrefix(a, "focus on ") })
			require.Positive(t, focus, "variation %d: %q", v, da)
			assert.Equal(t, ra[:focus+1], da[:focus+1], "variation %d: the search is the random tour's", v)
			m := boxRoom.FindStringSubmatch(d.Desc)
			require.NotNil(t, m, d.Desc)
			require.Greater(t, len(da), focus+2)
			assert.True(t, strings.HasPrefix(da[focus+1], "pick up "), "variation %d: %q", v, da)
			// then the move, after one teleport unless the creature sits in
			// the box's room
			rest := da[focus+2:]
			if len(rest) == 2 {
				assert.Equal(t, "teleport to "+m[1], rest[0], "variation %d: %q", v, da)
			} else {
				require.Len(t, rest, 1, "variation %d: %q", v, da)
			}
			assert.True(t, strings.HasPrefix(rest[len(rest)-1], "move "), "variation %d: %q", v, da)
			assert.LessOrEqual(t, len(da), len(ra), "variation %d", v)
			if len(da) < len(ra) {
				shorter++
			}
		}
	}
	assert.Greater(t, shorter, len(tk.Train)/4, "the random tour often searches on with the creature in hand")
}

// findLivingThing is textlab's find-living-thing task.
func findLivingThing(t *testing.T) environments.Task {
	t.Helper()
	tasks, err := textlab.Tasks(environments.Options{})
	require.NoError(t, err)
	tk, err := environments.FindTask(tasks, "find-living-thing")
	require.NoError(t, err)
	require.NotEmpty(t, tk.Train)
	return tk
}
