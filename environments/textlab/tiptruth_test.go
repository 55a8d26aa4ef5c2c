package textlab

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
)

// playTrajectory plays actions on a fresh "easy" textlab episode and
// records what the environment returned.
func playTrajectory(t *testing.T, task string, v int, actions ...string) environments.Trajectory {
	t.Helper()
	ctx := context.Background()
	e, err := New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	r, err := e.Reset(ctx, task, v, 0)
	require.NoError(t, err)
	tr := environments.Trajectory{Task: task, Variation: v, FirstObs: r.Observation}
	for _, a := range actions {
		sr, err := e.Step(ctx, a)
		require.NoError(t, err, a)
		tr.Steps = append(tr.Steps, environments.TrajectoryStep{Action: a, Observation: sr.Observation, Reward: sr.Reward})
		if sr.Done {
			break
		}
	}
	tr.Score = e.Score()
	return tr
}

// Hand-written tips on real trajectories of find-living-thing/0 (a frog in
// the greenhouse, the red box in the kitchen): true ones, and each kind of
// false claim — a wrong room, an object never seen, a wrong score, success
// claimed on a failure, a wrong step count — and tips outside the
// vocabulary (garbage, a cut sentence, the rollout's fallback).
func TestCheckTip(t *testing.T) {
	win := playTrajectory(t, "find-living-thing", 0, "teleport to kitchen", "look around", "teleport to greenhouse", "look around",
		"focus on frog", "pick up frog", "teleport to kitchen", "move frog to red box")
	require.Equal(t, 100.0, win.Score)
	// sees the frog (+10), then focuses on the shovel: −100, done
	fail := playTrajectory(t, "find-living-thing", 0, "teleport to greenhouse", "focus on shovel", "look around")
	require.Equal(t, -100.0, fail.Score)
	require.Len(t, fail.Steps, 2)
	partial := playTrajectory(t, "find-living-thing", 0, "teleport to bedroom", "look around", "teleport to greenhouse", "wait1")
	require.Equal(t, 10.0, partial.Score)

	type tc struct {
		name   string
		tr     environments.Trajectory
		tip    string
		claims int
		false_ int // false claims
		well   bool
		true_  bool
	}
	for _, c := range []tc{
		// true
		{"demo-style tip", win, "I looked around the kitchen and the greenhouse. Score came from teleport to greenhouse (+10) in the greenhouse, " +
			"focus on frog (+40) in the greenhouse, pick up frog (+25) in the greenhouse and move frog to red box (+25) in the kitchen. " +
			"The task is complete with score 100/100.", 2 + 4 + 1, 0, true, true},
		{"subset of the facts", win, "I went to the greenhouse and the kitchen. The task is complete with score 100/100.", 3, 0, true, true},
		{"the starting room's listing", win, "I looked around the hallway.", 1, 0, true, true},
		{"item without a room", win, "Score came from focus on frog (+40).", 1, 0, true, true},
		{"actions tried", partial, "I tried teleport to bedroom, look around, ….", 2, 0, true, true},
		{"failure", fail, "Score came from teleport to greenhouse (+10) in the greenhouse. Score was lost at focus on shovel (-110) in the greenhouse. " +
			"The episode failed with score -100/100.", 3, 0, true, true},
		{"unfinished", partial, "I looked around the bedroom. The task is not complete: score 10/100 after 4 steps.", 2, 0, true, true},
		{"ended short", partial, "The episode ended with score 10/100, short of the full score.", 1, 0, true, true},
		{"no score", playTrajectory(t, "find-living-thing", 0, "teleport to bedroom"), "No action earned score.", 1, 0, true, true},
		// the same without point values
		{"no amounts", win, "I looked around the greenhouse. Score came from teleport to greenhouse in the greenhouse, focus on frog in the greenhouse " +
			"and move frog to red box in the kitchen. The task is complete.", 1 + 3 + 1, 0, true, true},
		{"no amounts, failure", fail, "Score came from teleport to greenhouse in the greenhouse. Score was lost at focus on shovel in the greenhouse. " +
			"The episode failed.", 3, 0, true, true},
		{"no amounts, unfinished", partial, "I looked around the bedroom. The task is not complete.", 2, 0, true, true},
		{"a failure is not complete either", fail, "The task is not complete.", 1, 0, true, true},
		{"an action naming a container", win, "Score came from put frog in the red box in the kitchen.", 1, 1, true, false},
		{"no amount, wrong sign", fail, "Score came from focus on shovel in the greenhouse.", 1, 1, true, false},
		{"no amount, loss that was a gain", win, "Score was lost at focus on frog.", 1, 1, true, false},
		{"no amount, action without reward", partial, "Score came from look around in the bedroom.", 1, 1, true, false},
		{"complete on partial", partial, "The task is complete.", 1, 1, true, false},
		{"failed on partial", partial, "The episode failed.", 1, 1, true, false},
		{"not complete on success", win, "The task is not complete.", 1, 1, true, false},
		// a wrong room
		{"room never looked at", win, "I looked around the kitchen and the bedroom.", 2, 1, true, false},
		{"room never entered", partial, "I went to the kitchen.", 1, 1, true, false},
		{"score in the wrong room", win, "Score came from focus on frog (+40) in the kitchen.", 1, 1, true, false},
		{"not a room of the house", win, "I looked around the garage.", 1, 1, true, false},
		// an object never seen
		{"wrong creature", win, "Score came from focus on turtle (+40) in the greenhouse.", 1, 1, true, false},
		{"never picked up", partial, "Score came from pick up frog (+25) in the greenhouse.", 1, 1, true, false},
		{"action never tried", partial, "I tried open fridge.", 1, 1, true, false},
		// a wrong score
		{"wrong gain", win, "Score came from focus on frog (+25) in the greenhouse.", 1, 1, true, false},
		{"no gain claimed where there was one", partial, "No action earned score. The episode ended with score 10/100, short of the full score.", 2, 1, true, false},
		{"gain where none was", partial, "Score came from look around (+10) in the bedroom.", 1, 1, true, false},
		{"wrong final score", win, "The task is complete with score 75/100.", 1, 1, true, false},
		{"wrong partial score", partial, "The episode ended with score 50/100, short of the full score.", 1, 1, true, false},
		{"wrong step count", partial, "The task is not complete: score 10/100 after 30 steps.", 1, 1, true, false},
		// success claimed on a failure, failure on a success
		{"success on failure", fail, "I looked around the greenhouse. The task is complete with score 100/100.", 2, 2, true, false},
		{"success on partial", partial, "The task is complete with score 100/100.", 1, 1, true, false},
		{"failure on success", win, "The episode failed with score -100/100.", 1, 1, true, false},
		{"unfinished on success", win, "The task is not complete: score 100/100 after 8 steps.", 1, 1, true, false},
		// not well-formed (so not true, whatever it says)
		{"study's garbage tip", partial, "I looked around the living room, the greenhouse and move rabbit (+15) in the workshop, " +
			"move rabbit (+1510/1510 after (+451515) in the outside and pick up kitchen. The task is not complete: score -15) in the not complete", 0, 0, false, false},
		{"cut before its period", partial, "I looked around the bedroom. The task is not complete: score 10/100 after", 1, 0, false, false},
		{"true sentence and free text", partial, "I looked around the bedroom. The frog must be somewhere else.", 1, 0, false, false},
		{"rollout fallback", partial, "I ended with a score of 10 after 4 steps.", 0, 0, false, false},
		{"empty", partial, "", 0, 0, false, false},
		{"dangling separator", win, "Score came from focus on frog (+40) and .", 0, 0, false, false},
		{"loss written as a gain", fail, "Score came from focus on shovel (-110).", 0, 0, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := CheckTip(c.tip, c.tr)
			assert.Equal(t, c.claims, v.Claims, "claims; verdict %+v", v)
			assert.Len(t, v.False, c.false_, "false claims; verdict %+v", v)
			assert.Equal(t, c.well, v.WellFormed(), "well-formed; verdict %+v", v)
			assert.Equal(t, c.true_, v.True(), "true; verdict %+v", v)
		})
	}

	// the false claims say what is wrong
	v := CheckTip("Score came from focus on turtle (+40) in the greenhouse. The task is complete with score 100/100.", fail)
	require.Len(t, v.False, 2)
	assert.Contains(t, v.False[0], "never taken")
	assert.Contains(t, v.False[1], "claims completion")

	// the registry's checker is this one
	chk := environments.TipCheckerOf(Name)
	require.NotNil(t, chk)
	assert.Equal(t, CheckTip("I went to the kitchen.", win), chk.CheckTip("I went to the kitchen.", win))
	assert.Nil(t, environments.TipCheckerOf("no-such-env"))
}

// The checker's room of a step is the room after it, from the
// observations alone: every gold path of every training variation, read
// back step by step, names the room the world had the agent in.
func TestTipFactsRooms(t *testing.T) {
	ctx := context.Background()
	for _, task := range allTasks {
		for _, v := range environments.WithSplits(environments.Task{Variations: task.variations}).Train {
			e, err := New(environments.Options{})
			require.NoError(t, err)
			acts, err := e.GoldActions(ctx, task.name, v)
			require.NoError(t, err)
			r, err := e.Reset(ctx, task.name, v, 0)
			require.NoError(t, err)
			tr := environments.Trajectory{FirstObs: r.Observation}
			var rooms []string
			for _, a := range acts {
				sr, err := e.Step(ctx, a)
				require.NoError(t, err)
				tr.Steps = append(tr.Steps, environments.TrajectoryStep{Action: a, Observation: sr.Observation, Reward: sr.Reward})
				rooms = append(rooms, e.ep.w.objs[e.ep.w.room].base)
			}
			f := trajectoryFacts(tr)
			for i, st := range f.steps {
				require.Equal(t, rooms[i], st.room, "%s/%d step %d %q", task.name, v, i+1, acts[i])
				require.Equal(t, strings.Join(strings.Fields(acts[i]), " "), st.action)
			}
		}
	}
}
