package textlab

import (
	"context"
	"fmt"
	"strings"

	"github.com/empo2/empo2/environments"
)

// Name is the registry name of this environment.
const Name = "textlab"

func init() {
	environments.Register(environments.Spec{
		Name:        Name,
		Description: "native ScienceWorld-style text world (pure Go, no JVM), for tests and CPU experiments",
		New:         func(o environments.Options) (environments.Env, error) { return New(o) },
		Tasks:       Tasks,
		TipChecker:  tipChecker{},
	})
}

// Tasks lists the task families with their variation splits and limits.
func Tasks(environments.Options) ([]environments.Task, error) {
	out := make([]environments.Task, 0, len(allTasks))
	for _, t := range allTasks {
		out = append(out, environments.WithSplits(environments.Task{
			Name: t.name, Description: t.summary, Variations: t.variations,
			StepLimit: t.stepLimit, HeldOut: t.heldOut,
		}))
	}
	return out, nil
}

// Simplification names accepted in Options.Simplifications (comma
// separated); "easy" turns all of them on.
var Simplifications = []string{"openDoors", "openContainers", "teleportAction"}

func parseSimplifications(s string) (simplifications, error) {
	var out simplifications
	for _, f := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "":
		case "easy":
			out = simplifications{true, true, true}
		case "opendoors":
			out.openDoors = true
		case "opencontainers":
			out.openContainers = true
		case "teleportaction":
			out.teleport = true
		default:
			return out, fmt.Errorf("%w: textlab simplification %q (have easy, %s)", environments.ErrNotSupported, f, strings.Join(Simplifications, ", "))
		}
	}
	return out, nil
}

// Env is one textlab instance.
type Env struct {
	opts    environments.Options
	simp    simplifications
	correct bool

	task   taskDef
	ep     *episode
	limit  int
	moves  int
	done   bool
	closed bool
}

var (
	_ environments.Env          = (*Env)(nil)
	_ environments.GoldProvider = (*Env)(nil)
)

// New makes an instance; Options.Simplifications, StepLimit and the
// correct_actions extra are honoured.
func New(opts environments.Options) (*Env, error) {
	simp, err := parseSimplifications(opts.Simplifications)
	if err != nil {
		return nil, err
	}
	return &Env{opts: opts, simp: simp, correct: environments.CorrectionEnabled(opts)}, nil
}

func (e *Env) newEpisode(task string, variation int) (taskDef, *episode, error) {
	t, ok := lookupTask(task)
	if !ok {
		names := make([]string, len(allTasks))
		for i, t := range allTasks {
			names[i] = t.name
		}
		return t, nil, fmt.Errorf("%w: textlab has no task %q (have %s)", environments.ErrUnknownTask, task, strings.Join(names, ", "))
	}
	if variation < 0 || variation >= t.variations {
		return t, nil, fmt.Errorf("%w: textlab task %s has variations 0..%d, got %d", environments.ErrBadVariation, task, t.variations-1, variation)
	}
	return t, t.build(variation, buildHouse(e.simp)), nil
}

// Reset starts an episode; the observation is the "look around" text.
func (e *Env) Reset(ctx context.Context, task string, variation int, seed int64) (environments.ResetResult, error) {
	if e.closed {
		return environments.ResetResult{}, environments.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return environments.ResetResult{}, err
	}
	t, ep, err := e.newEpisode(task, variation)
	if err != nil {
		return environments.ResetResult{}, err
	}
	e.task, e.ep, e.moves, e.done = t, ep, 0, false
	e.limit = environments.StepLimit(environments.Task{StepLimit: t.stepLimit}, e.opts)
	return environments.ResetResult{
		Observation:     ep.w.look(),
		TaskDescription: ep.desc,
		Info:            environments.Info{"moves": 0, "score": 0, "task": t.name, "variation": variation},
	}, nil
}

// Step plays one action. Every action, understood or not, counts towards
// the step limit; the episode ends when the task is completed, failed
// (score −100) or the limit is reached.
func (e *Env) Step(ctx context.Context, action string) (environments.StepResult, error) {
	switch {
	case e.closed:
		return environments.StepResult{}, environments.ErrClosed
	case e.ep == nil:
		return environments.StepResult{}, environments.ErrNotReset
	case e.done:
		return environments.StepResult{}, environments.ErrEpisodeDone
	}
	if err := ctx.Err(); err != nil {
		return environments.StepResult{}, err
	}
	info := environments.Info{}
	if e.correct {
		if fixed, changed := environments.CorrectAction(action, e.ep.w.validActions()); changed {
			info["corrected_from"] = action
			action = fixed
		}
	}
	before := e.ep.score
	var obs string
	var ev event
	if normalize(action) == "task" {
		obs, ev = e.ep.desc, event{ok: true, focus: -1, measured: -1}
	} else {
		obs, ev = e.ep.w.act(action)
		e.ep.see(ev)
	}
	e.moves++
	e.done = e.ep.done || e.moves >= e.limit
	if e.done && !e.ep.done {
		info[environments.InfoTruncated] = true
	}
	info["moves"] = e.moves
	info["score"] = e.ep.score
	info["won"] = e.ep.won
	info["understood"] = ev.ok
	return environments.StepResult{
		Observation: obs,
		Reward:      float64(e.ep.score - before),
		Done:        e.done,
		Info:        info,
	}, nil
}

// ValidActions lists the actions that make sense now, sorted.
func (e *Env) ValidActions(context.Context) ([]string, error) {
	if e.closed {
		return nil, environments.ErrClosed
	}
	if e.ep == nil {
		return nil, environments.ErrNotReset
	}
	return e.ep.w.validActions(), nil
}

// Score is the current score (0–100, −100 after a failure).
func (e *Env) Score() float64 {
	if e.ep == nil {
		return 0
	}
	return float64(e.ep.score)
}

// Close ends the instance; it is idempotent.
func (e *Env) Close() error { e.closed = true; return nil }

// GoldActions plays the task's scripted plan on a private world and returns
// its actions; it fails if the plan does not reach 100.
func (e *Env) GoldActions(ctx context.Context, task string, variation int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, ep, err := e.newEpisode(task, variation)
	if err != nil {
		return nil, err
	}
	g := &goldAgent{w: ep.w, ep: ep}
	ep.gold(g)
	if g.err != nil {
		return nil, fmt.Errorf("textlab: gold path of %s/%d: %w", task, variation, g.err)
	}
	if !ep.won {
		return nil, fmt.Errorf("textlab: gold path of %s/%d ends at score %d, not 100", task, variation, ep.score)
	}
	return g.acts, nil
}
