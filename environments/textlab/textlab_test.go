package textlab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/empo2/empo2/environments"
	"github.com/stretchr/testify/require"
)

var ctx = context.Background()

func newEnv(t testing.TB, opts environments.Options) *Env {
	t.Helper()
	e, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// playGold replays the gold path through the public Env API.
func playGold(t testing.TB, e *Env, task string, v int) (environments.StepResult, int) {
	t.Helper()
	gold, err := e.GoldActions(ctx, task, v)
	require.NoError(t, err)
	_, err = e.Reset(ctx, task, v, 1)
	require.NoError(t, err)
	var last environments.StepResult
	total := 0.0
	for i, a := range gold {
		last, err = e.Step(ctx, a)
		require.NoError(t, err, "%s/%d step %d %q", task, v, i, a)
		total += last.Reward
		require.Equal(t, i == len(gold)-1, last.Done, "%s/%d: done after %q (step %d of %d): %s", task, v, a, i+1, len(gold), last.Observation)
		require.True(t, last.Info["understood"].(bool), "%s/%d: %q not understood", task, v, a)
	}
	require.Equal(t, total, e.Score(), "rewards add up to the score")
	return last, len(gold)
}

func TestGoldPathsReach100(t *testing.T) {
	tasks, err := Tasks(environments.Options{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(tasks), 6)
	e := newEnv(t, environments.Options{})
	heldOut := 0
	for _, task := range tasks {
		if task.HeldOut {
			heldOut++
		}
		require.Greater(t, task.Variations, 20, task.Name)
		longest := 0
		// Every variation: the worlds are cheap.
		for v := range task.Variations {
			last, n := playGold(t, e, task.Name, v)
			require.Equal(t, 100.0, e.Score(), "%s/%d", task.Name, v)
			require.True(t, last.Info["won"].(bool))
			longest = max(longest, n)
		}
		require.Less(t, longest, task.StepLimit, "%s: gold path must fit the step limit", task.Name)
		t.Logf("%s: %d variations (train %d, dev %d, test %d), longest gold %d, limit %d, held out %v",
			task.Name, task.Variations, len(task.Train), len(task.Dev), len(task.TestVars), longest, task.StepLimit, task.HeldOut)
	}
	require.GreaterOrEqual(t, heldOut, 1)
}

func TestGoldNeedsExploration(t *testing.T) {
	// Every task starts in the hallway behind closed doors, and nothing the
	// task lets the agent focus on is there (every task is won only through
	// a right focus): success needs visiting rooms the agent has not seen.
	e := newEnv(t, environments.Options{})
	for _, task := range allTasks {
		for v := range task.variations {
			res, err := e.Reset(ctx, task.name, v, 0)
			require.NoError(t, err)
			require.Contains(t, res.Observation, "This room is called the hallway.")
			require.Contains(t, res.Observation, "A door to the kitchen (that is closed)")
			w := e.ep.w
			require.Equal(t, "hallway", w.objs[w.room].base)
			for _, id := range w.visible() {
				require.False(t, e.ep.focusOK(id), "%s/%d: %q, a right focus, is visible from the start", task.name, v, w.objs[id].name())
			}
			for id, o := range w.objs {
				if o != nil && !o.is(fRoom) && e.ep.focusOK(id) {
					require.NotEqual(t, w.room, w.roomOf(id), "%s/%d: %q starts in the hallway", task.name, v, o.name())
					require.NotContains(t, res.Observation, o.name())
				}
			}
			if v%7 == 0 {
				gold, err := e.GoldActions(ctx, task.name, v)
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(gold[0], "open door to ") || strings.HasPrefix(gold[0], "go to "), "%s/%d starts with %q", task.name, v, gold[0])
			}
		}
	}
}

func TestWrongFocusEndsAtMinus100(t *testing.T) {
	e := newEnv(t, environments.Options{})
	for _, task := range allTasks {
		_, err := e.Reset(ctx, task.name, 3, 0)
		require.NoError(t, err)
		r, err := e.Step(ctx, "focus on picture") // the hallway's picture is never a target
		require.NoError(t, err)
		require.True(t, r.Done, task.name)
		require.Equal(t, -100.0, e.Score(), task.name)
		require.Equal(t, -100.0, r.Reward, task.name)
		_, err = e.Step(ctx, "look around")
		require.ErrorIs(t, err, environments.ErrEpisodeDone)
	}
}

func TestThermometerOrderAndWrongBox(t *testing.T) {
	e := newEnv(t, environments.Options{})
	gold, err := e.GoldActions(ctx, "use-thermometer", 5)
	require.NoError(t, err)
	// Replay gold but drop the thermometer focus: focusing the object first fails.
	_, err = e.Reset(ctx, "use-thermometer", 5, 0)
	require.NoError(t, err)
	var r environments.StepResult
	for _, a := range gold {
		if a == "focus on thermometer" {
			continue
		}
		r, err = e.Step(ctx, a)
		require.NoError(t, err)
		if r.Done {
			break
		}
	}
	require.True(t, r.Done)
	require.Equal(t, -100.0, e.Score())

	// Right order, wrong box.
	_, err = e.Reset(ctx, "use-thermometer", 5, 0)
	require.NoError(t, err)
	last := gold[len(gold)-1]
	wrong := strings.Replace(last, "red box", "GREEN", 1)
	wrong = strings.Replace(wrong, "green box", "red box", 1)
	wrong = strings.Replace(wrong, "GREEN", "green box", 1)
	require.NotEqual(t, last, wrong)
	for _, a := range gold[:len(gold)-1] {
		r, err = e.Step(ctx, a)
		require.NoError(t, err)
	}
	partial := e.Score()
	require.Greater(t, partial, 0.0)
	require.Less(t, partial, 100.0)
	r, err = e.Step(ctx, wrong)
	require.NoError(t, err)
	require.True(t, r.Done)
	require.Equal(t, -100.0, e.Score())
}

func TestPartialCreditIsMonotoneAlongGold(t *testing.T) {
	e := newEnv(t, environments.Options{})
	for _, task := range allTasks {
		gold, err := e.GoldActions(ctx, task.name, 1)
		require.NoError(t, err)
		_, err = e.Reset(ctx, task.name, 1, 0)
		require.NoError(t, err)
		prev, distinct := 0.0, map[float64]bool{}
		for _, a := range gold {
			r, err := e.Step(ctx, a)
			require.NoError(t, err)
			require.GreaterOrEqual(t, r.Reward, 0.0, "%s: %q lowered the score", task.name, a)
			require.GreaterOrEqual(t, e.Score(), prev)
			prev = e.Score()
			distinct[prev] = true
		}
		require.GreaterOrEqual(t, len(distinct), 3, "%s: gold path should earn partial credit on the way", task.name)
	}
}

func TestStepLimit(t *testing.T) {
	e := newEnv(t, environments.Options{StepLimit: 5})
	_, err := e.Reset(ctx, "melt", 0, 0)
	require.NoError(t, err)
	for i := 1; i <= 5; i++ {
		r, err := e.Step(ctx, "wait1")
		require.NoError(t, err)
		require.Equal(t, i == 5, r.Done, "step %d", i)
		require.Equal(t, i == 5, r.Info[environments.InfoTruncated] == true, "the limit ended it")
		require.Equal(t, i, r.Info["moves"])
	}
	_, err = e.Step(ctx, "wait1")
	require.ErrorIs(t, err, environments.ErrEpisodeDone)

	// The task's own limit applies without an override.
	e2 := newEnv(t, environments.Options{})
	_, err = e2.Reset(ctx, "find-living-thing", 0, 0)
	require.NoError(t, err)
	n := 0
	for {
		r, err := e2.Step(ctx, "look around")
		require.NoError(t, err)
		n++
		if r.Done {
			break
		}
	}
	require.Equal(t, 30, n)
	require.Equal(t, 0.0, e2.Score())
}

func TestInvalidActions(t *testing.T) {
	e := newEnv(t, environments.Options{})
	_, err := e.Step(ctx, "look around")
	require.ErrorIs(t, err, environments.ErrNotReset)
	_, err = e.ValidActions(ctx)
	require.ErrorIs(t, err, environments.ErrNotReset)
	_, err = e.Reset(ctx, "no-such-task", 0, 0)
	require.ErrorIs(t, err, environments.ErrUnknownTask)
	_, err = e.Reset(ctx, "melt", 10_000, 0)
	require.ErrorIs(t, err, environments.ErrBadVariation)
	_, err = e.Reset(ctx, "melt", -1, 0)
	require.ErrorIs(t, err, environments.ErrBadVariation)
	_, err = New(environments.Options{Simplifications: "flying"})
	require.ErrorIs(t, err, environments.ErrNotSupported)

	_, err = e.Reset(ctx, "light-bulb", 0, 0)
	require.NoError(t, err)
	for _, a := range []string{"", "dance", "go to the moon", "pick up kitchen", "open sesame", "move hammer to", "connect a to b", "focus on unicorn", "go to kitchen"} {
		r, err := e.Step(ctx, a)
		require.NoError(t, err, a)
		require.False(t, r.Done, a)
		require.Equal(t, 0.0, r.Reward, a)
		if a == "go to kitchen" { // understood, but the door is closed
			require.Equal(t, "The door is not open.", r.Observation)
			continue
		}
		require.Equal(t, msgUnknown, r.Observation, a)
		require.False(t, r.Info["understood"].(bool), a)
	}
	r, err := e.Step(ctx, "  OPEN   the Door to Kitchen ")
	require.NoError(t, err)
	require.Equal(t, "The door is now open.", r.Observation)
	r, err = e.Step(ctx, "go to kitchen")
	require.NoError(t, err)
	require.Equal(t, "You move to the kitchen.", r.Observation)
	r, err = e.Step(ctx, "pick up stove")
	require.NoError(t, err)
	require.Equal(t, "The stove can't be picked up.", r.Observation)
	r, err = e.Step(ctx, "look around")
	require.NoError(t, err)
	require.Contains(t, r.Observation, "This room is called the kitchen.")
	require.Contains(t, r.Observation, "a stove, which is turned off. On the stove is: nothing.")
	require.Contains(t, r.Observation, "a fridge. The fridge door is closed.")
	r, err = e.Step(ctx, "task")
	require.NoError(t, err)
	require.Contains(t, r.Observation, "Your task is to turn on the")
}

func TestActionCorrection(t *testing.T) {
	e := newEnv(t, environments.Options{Extra: map[string]string{environments.ExtraCorrectActions: "jaccard"}})
	_, err := e.Reset(ctx, "find-living-thing", 0, 0)
	require.NoError(t, err)
	r, err := e.Step(ctx, "please open the kitchen door to kitchen")
	require.NoError(t, err)
	require.Equal(t, "please open the kitchen door to kitchen", r.Info["corrected_from"])
	require.Equal(t, "The door is now open.", r.Observation)
	r, err = e.Step(ctx, "look around")
	require.NoError(t, err)
	require.NotContains(t, r.Info, "corrected_from")
}

func TestDeterminism(t *testing.T) {
	play := func(seed int64) []string {
		e := newEnv(t, environments.Options{})
		res, err := e.Reset(ctx, "light-bulb", 17, seed)
		require.NoError(t, err)
		out := []string{res.Observation, res.TaskDescription}
		rng := rand.New(rand.NewPCG(7, 7))
		for range 30 {
			va, err := e.ValidActions(ctx)
			require.NoError(t, err)
			r, err := e.Step(ctx, va[rng.IntN(len(va))])
			require.NoError(t, err)
			out = append(out, r.Observation, fmt.Sprint(r.Reward))
			if r.Done {
				break
			}
		}
		return out
	}
	a, b, c := play(1), play(1), play(99)
	require.Equal(t, a, b)
	require.Equal(t, a, c, "the world ignores the seed: it is a function of task and variation")

	// Different variations differ.
	e := newEnv(t, environments.Options{})
	d1, err := e.Reset(ctx, "find-living-thing", 0, 0)
	require.NoError(t, err)
	d2, err := e.Reset(ctx, "find-living-thing", 1, 0)
	require.NoError(t, err)
	require.NotEqual(t, d1.TaskDescription+fmt.Sprint(e.GoldActions(ctx, "find-living-thing", 0)), d2.TaskDescription+fmt.Sprint(e.GoldActions(ctx, "find-living-thing", 1)))
}

func TestRandomValidActionsNeverPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, simp := range []string{"", "easy"} {
		e := newEnv(t, environments.Options{Simplifications: simp})
		for ep := range 120 {
			task := allTasks[ep%len(allTasks)]
			_, err := e.Reset(ctx, task.name, rng.IntN(task.variations), int64(ep))
			require.NoError(t, err)
			for {
				va, err := e.ValidActions(ctx)
				require.NoError(t, err)
				require.NotEmpty(t, va)
				a := va[rng.IntN(len(va))]
				for strings.HasPrefix(a, "focus on ") && rng.IntN(20) != 0 { // keep episodes long
					a = va[rng.IntN(len(va))]
				}
				if rng.IntN(10) == 0 { // some garbage too
					a = a[:rng.IntN(len(a)+1)]
				}
				r, err := e.Step(ctx, a)
				require.NoError(t, err)
				require.True(t, e.Score() >= -100 && e.Score() <= 100)
				require.True(t, e.Score() == -100 || e.Score() >= 0)
				if r.Done {
					break
				}
			}
		}
	}
}

func TestValidActionsAreUnderstood(t *testing.T) {
	// Along each task's gold path (start room, other rooms, opened
	// containers, things in hand, circuits half built), every listed valid
	// action is understood by the parser, and the gold action is listed.
	e := newEnv(t, environments.Options{})
	probe := newEnv(t, environments.Options{})
	checked := 0
	for _, task := range allTasks {
		gold, err := e.GoldActions(ctx, task.name, 2)
		require.NoError(t, err)
		_, err = e.Reset(ctx, task.name, 2, 0)
		require.NoError(t, err)
		for i, g := range gold[:len(gold)-1] {
			va, err := e.ValidActions(ctx)
			require.NoError(t, err)
			if !strings.HasPrefix(g, "wait") {
				require.Contains(t, va, g, "%s: gold action is listed as valid", task.name)
			}
			for _, a := range va {
				// Replay the gold prefix on a second instance, then try a.
				_, err := probe.Reset(ctx, task.name, 2, 0)
				require.NoError(t, err)
				for _, p := range gold[:i] {
					_, err := probe.Step(ctx, p)
					require.NoError(t, err)
				}
				r, err := probe.Step(ctx, a)
				require.NoError(t, err)
				require.True(t, r.Info["understood"].(bool), "%s after %d gold actions: valid action %q not understood: %s", task.name, i, a, r.Observation)
				checked++
			}
			_, err = e.Step(ctx, g)
			require.NoError(t, err)
		}
	}
	require.Greater(t, checked, 500)
}

func TestSimplifications(t *testing.T) {
	e := newEnv(t, environments.Options{Simplifications: "easy"})
	res, err := e.Reset(ctx, "melt", 0, 0)
	require.NoError(t, err)
	require.Contains(t, res.Observation, "A door to the kitchen (that is open)")
	r, err := e.Step(ctx, "teleport to foundry")
	require.NoError(t, err)
	require.Equal(t, "You teleport to the foundry.", r.Observation)
	r, err = e.Step(ctx, "look around")
	require.NoError(t, err)
	require.Contains(t, r.Observation, "The blast furnace door is open.")
	_, _ = playGold(t, e, "light-bulb", 3)
	require.Equal(t, 100.0, e.Score())
}

func TestRegistered(t *testing.T) {
	spec, err := environments.Lookup(Name)
	require.NoError(t, err)
	env, err := spec.New(environments.Options{})
	require.NoError(t, err)
	require.NoError(t, env.Close())
	require.NoError(t, env.Close(), "Close is idempotent")
	_, err = env.Reset(ctx, "melt", 0, 0)
	require.ErrorIs(t, err, environments.ErrClosed)
	_, ok := env.(environments.GoldProvider)
	require.True(t, ok)
}

// TestPoolParallelGold plays gold paths on a Pool of textlab instances from
// many goroutines at once: under -race this catches any state shared
// between instances (task tables, templates); the results must match a
// sequential run.
func TestPoolParallelGold(t *testing.T) {
	p, err := environments.NewPool(Name, environments.Options{}, 4)
	require.NoError(t, err)
	defer p.Close()
	const jobs = 24
	got := make([]string, jobs)
	err = p.Map(ctx, jobs, func(ctx context.Context, i int, env environments.Env) error {
		task := allTasks[i%len(allTasks)]
		v := (i * 7) % task.variations
		gold, err := env.(environments.GoldProvider).GoldActions(ctx, task.name, v)
		if err != nil {
			return err
		}
		res, err := env.Reset(ctx, task.name, v, int64(i))
		if err != nil {
			return err
		}
		out := res.Observation
		for _, a := range gold {
			r, err := env.Step(ctx, a)
			if err != nil {
				return err
			}
			out += r.Observation
		}
		if env.Score() != 100 {
			return fmt.Errorf("%s/%d ended at %v", task.name, v, env.Score())
		}
		got[i] = out
		return nil
	})
	require.NoError(t, err)
	seq := newEnv(t, environments.Options{})
	for i := range jobs {
		task := allTasks[i%len(allTasks)]
		v := (i * 7) % task.variations
		gold, err := seq.GoldActions(ctx, task.name, v)
		require.NoError(t, err)
		res, err := seq.Reset(ctx, task.name, v, 0)
		require.NoError(t, err)
		out := res.Observation
		for _, a := range gold {
			r, err := seq.Step(ctx, a)
			require.NoError(t, err)
			out += r.Observation
		}
		require.Equal(t, out, got[i], "job %d: parallel and sequential transcripts differ", i)
	}
}
