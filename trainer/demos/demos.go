package demos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// Demonstrations for SFT (`empo2 env demos`): an episode played by a known
// action sequence, written as chats in exactly the trainer's prompt format
// (rollout.Messages / TipMessages, tokenized by the same rollout.Renderer), so that a model
// fine-tuned on them sees at RL time what it saw in SFT.
//
// Two kinds of demonstration:
//
//   - gold: the environment's gold actions (environments.GoldProvider). A
//     gold path may use knowledge the agent cannot have: textlab's gold
//     walks straight to the room where the hidden object lies, so
//     variations whose task text and first observation are identical get
//     different first actions, and no policy of the observations can copy
//     them all (measured on textlab's training variations: the best
//     deterministic imitator reaches 34% — docs/sft.md).
//   - explore: the same work as the gold path, but every move to a room the
//     agent has not seen yet is replaced by a fixed, observable search:
//     rooms named in the task first, then rooms in the order their doors
//     were first seen, each visited with "teleport to R" and "look around",
//     until the room where the gold path works next; rooms already seen are
//     reached directly. Every choice is then a function of what the agent
//     has observed, so the demos can be imitated. It needs the
//     ScienceWorld-style "teleport to" and "look around" actions (textlab
//     and ScienceWorld with the teleport simplification, e.g. "easy").
//
// After each episode a tip-writing turn is added (rollout.TipMessages + a
// tip derived from the trajectory, Tip) so that the SFT'd model can write
// the tips that EMPO²'s memory stores.

// ErrDemo wraps failures to build a demonstration and bad demonstration
// settings.
var ErrDemo = errors.New("trainer: demos")

// ErrOddVariation: one variation's world does not fit the demo's kind (an
// explore demo's first observation names no room); Run skips it with a
// warning naming it instead of ending the whole file.
var ErrOddVariation = errors.New("this variation does not fit the demo kind")

// Kind is how a demonstration chooses its actions.
type Kind string

// Demo kinds (see the file comment).
const (
	KindGold    Kind = "gold"    // the environment's gold actions
	KindExplore Kind = "explore" // the gold path's work with an observable room search
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindGold || k == KindExplore }

// Step is one step of a demonstration.
type Step struct {
	Action      string  `json:"action"`
	Observation string  `json:"observation"`
	Reward      float64 `json:"reward"`
	Score       float64 `json:"score"`
	Done        bool    `json:"done"`
	Room        string  `json:"room,omitempty"` // agent's room after the step, when known
}

// Demo is one played episode.
type Demo struct {
	Env       string  `json:"env"`
	Task      string  `json:"task"`
	Variation int     `json:"variation"`
	Kind      Kind    `json:"kind"`
	Desc      string  `json:"-"`
	FirstObs  string  `json:"-"`
	Steps     []Step  `json:"-"`
	Score     float64 `json:"score"`
	Done      bool    `json:"done"`
}

// Actions lists the demo's actions.
func (d Demo) Actions() []string {
	out := make([]string, len(d.Steps))
	for i, s := range d.Steps {
		out[i] = s.Action
	}
	return out
}

// Turns is the demo as prompt turns.
func (d Demo) Turns() []rollout.Turn {
	out := make([]rollout.Turn, len(d.Steps))
	for i, s := range d.Steps {
		out[i] = rollout.Turn{Action: s.Action, Observation: s.Observation}
	}
	return out
}

// Trajectory is the demo as its environment produced it (for an
// environments.TipChecker).
func (d Demo) Trajectory() environments.Trajectory {
	tr := environments.Trajectory{Task: d.Task, Variation: d.Variation, FirstObs: d.FirstObs, Score: d.Score,
		Steps: make([]environments.TrajectoryStep, len(d.Steps))}
	for i, s := range d.Steps {
		tr.Steps[i] = environments.TrajectoryStep{Action: s.Action, Observation: s.Observation, Reward: s.Reward}
	}
	return tr
}

var (
	// a room, or ScienceWorld's outside ("This outside location is called
	// the outside.")
	roomRe     = regexp.MustCompile(`This (?:room|outside location) is called the ([^.\n]+)\.`)
	doorRe     = regexp.MustCompile(`A door to the ([^(\n]+?) \(`)
	moveRe     = regexp.MustCompile(`^(?:go to|teleport to) (.+)$`)
	arrivedRe  = regexp.MustCompile(`You (?:move|teleport) to the ([^.\n]+)\.`)
	openDoorRe = regexp.MustCompile(`^open door to `)
)

// reset starts an episode and returns the demo header.
func reset(ctx context.Context, env environments.Env, envName, task string, variation int, seed int64, kind Kind) (Demo, error) {
	r, err := env.Reset(ctx, task, variation, seed)
	if err != nil {
		return Demo{}, fmt.Errorf("%w: reset %s/%d: %w", ErrDemo, task, variation, err)
	}
	return Demo{Env: envName, Task: task, Variation: variation, Kind: kind, Desc: r.TaskDescription, FirstObs: r.Observation}, nil
}

// room is the agent's current room: the last step's, else the one the
// first observation names ("" when unknown).
func (d *Demo) room() string {
	if n := len(d.Steps); n > 0 {
		return d.Steps[n-1].Room
	}
	return firstRoom(d.FirstObs)
}

// step takes one action and records it, with the room the agent is in
// afterwards (the arrival room of a move, else the current one).
func (d *Demo) step(ctx context.Context, env environments.Env, action string) (environments.StepResult, error) {
	room := d.room()
	sr, err := env.Step(ctx, action)
	if err != nil {
		return sr, fmt.Errorf("%w: %s/%d step %d %q: %w", ErrDemo, d.Task, d.Variation, len(d.Steps)+1, action, err)
	}
	if m := arrivedRe.FindStringSubmatch(sr.Observation); m != nil {
		room = m[1]
	}
	d.Steps = append(d.Steps, Step{Action: action, Observation: sr.Observation, Reward: sr.Reward, Score: env.Score(), Done: sr.Done, Room: room})
	d.Score, d.Done = env.Score(), sr.Done
	return sr, nil
}

// Play replays actions from a fresh reset and records the episode
// (stopping early if the episode ends).
func Play(ctx context.Context, env environments.Env, envName, task string, variation int, seed int64, actions []string) (Demo, error) {
	d, err := reset(ctx, env, envName, task, variation, seed, KindGold)
	if err != nil {
		return d, err
	}
	_, err = d.play(ctx, env, actions)
	return d, err
}

// play takes the actions in turn until one ends the episode (done).
func (d *Demo) play(ctx context.Context, env environments.Env, actions []string) (done bool, err error) {
	for _, a := range actions {
		sr, err := d.step(ctx, env, a)
		if err != nil || sr.Done {
			return sr.Done, err
		}
	}
	return false, nil
}

// firstLine is obs's first line, cut to 80 characters, for messages.
func firstLine(obs string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(obs), "\n")
	if r := []rune(l); len(r) > 80 {
		l = string(r[:80]) + "…"
	}
	return l
}

func firstRoom(obs string) string {
	if m := roomRe.FindStringSubmatch(obs); m != nil {
		return m[1]
	}
	return ""
}

// Gold plays the environment's gold actions.
func Gold(ctx context.Context, env environments.Env, envName, task string, variation int, seed int64) (Demo, error) {
	gp, ok := env.(environments.GoldProvider)
	if !ok {
		return Demo{}, fmt.Errorf("%w: %s has no gold actions", environments.ErrNotSupported, envName)
	}
	acts, err := gp.GoldActions(ctx, task, variation)
	if err != nil {
		return Demo{}, fmt.Errorf("%w: gold actions of %s/%d: %w", ErrDemo, task, variation, err)
	}
	return Play(ctx, env, envName, task, variation, seed, acts)
}

// Explore plays the gold path's work with an observable room search in
// place of its moves (see the file comment). The environment must accept
// "teleport to ROOM" (e.g. textlab with Simplifications "easy").
func Explore(ctx context.Context, env environments.Env, envName, task string, variation int, seed int64) (Demo, error) {
	return ExploreTour(ctx, env, envName, task, variation, seed, TourDoors)
}

// Tour is the order in which an explore demo searches the rooms it has
// not seen yet.
type Tour string

// Tours.
const (
	// TourDoors: rooms named in the task first, then doors in order of
	// discovery (Explore; every choice a function of the observations).
	TourDoors Tour = "doors"
	// TourRandom: at every search move a room drawn uniformly among the
	// known rooms not looked at yet (seeded by the demo's seed, task and
	// variation). Nothing in the observations predicts the next room, so
	// a policy can repeat such a tour only by reading it from a memory of
	// it: memory-reading records (ReadRecords) on these demos make the
	// block, not the history, decide the answer (docs/experiment.md,
	// Study 3, gate run 5).
	TourRandom Tour = "random"
	// TourRandomDirect: TourRandom's search for the rooms the task does
	// not name; a room the task names (find-living-thing's box room) is
	// reached by one teleport when the work needs it, never searched for, so
	// that what follows the search is a function of the task text (the
	// random tour continues its search with the creature in hand until it
	// happens on the box's room; docs/results.md, fourth round).
	TourRandomDirect Tour = "random-direct"
)

// random reports whether t draws its search order (TourRandom,
// TourRandomDirect).
func (t Tour) random() bool { return t == TourRandom || t == TourRandomDirect }

// Valid reports whether t is a known tour ("" counts as TourDoors).
func (t Tour) Valid() bool {
	return t == "" || t == TourDoors || t.random()
}

// ExploreTour is Explore with the search order tour.
func ExploreTour(ctx context.Context, env environments.Env, envName, task string, variation int, seed int64, tour Tour) (Demo, error) {
	if !tour.Valid() {
		panic(fmt.Sprintf("demos: tour %q", tour))
	}
	var rng *rand.Rand
	if tour.random() {
		h := fnv.New64a()
		h.Write([]byte(task))
		rng = rand.New(rand.NewPCG(rollout.MixSeed(seed, int64(variation)), h.Sum64()))
	}
	gp, ok := env.(environments.GoldProvider)
	if !ok {
		return Demo{}, fmt.Errorf("%w: %s has no gold actions", environments.ErrNotSupported, envName)
	}
	gold, err := gp.GoldActions(ctx, task, variation)
	if err != nil {
		return Demo{}, fmt.Errorf("%w: gold actions of %s/%d: %w", ErrDemo, task, variation, err)
	}
	d, err := reset(ctx, env, envName, task, variation, seed, KindExplore)
	if err != nil {
		return d, err
	}
	cur := firstRoom(d.FirstObs)
	if cur == "" {
		return d, fmt.Errorf("%w: %w: %s/%d: explore demos need a ScienceWorld-style first observation naming the room (\"This room is called the …\"), this one starts %q",
			environments.ErrNotSupported, ErrOddVariation, task, variation, firstLine(d.FirstObs))
	}
	looked := map[string]bool{cur: true}
	var queue []string // tour order: rooms named in the task, then doors in order of discovery
	seen := map[string]bool{}
	enqueue := func(r string) {
		r = strings.TrimSpace(r)
		if r != "" && !seen[r] {
			seen[r] = true
			queue = append(queue, r)
		}
	}
	doors := doorRe.FindAllStringSubmatch(d.FirstObs, -1)
	for _, r := range namedRooms(d.Desc, doors) {
		enqueue(r)
	}
	for _, m := range doors {
		enqueue(m[1])
	}
	do := func(a string) (bool, error) {
		sr, err := d.step(ctx, env, a)
		if err != nil {
			return false, err
		}
		cur = d.room()
		return sr.Done, nil
	}
	goldRoom := cur
	worked := false // a gold action other than a move has been done
	for _, a := range gold {
		if m := moveRe.FindStringSubmatch(a); m != nil {
			goldRoom = m[1]
			continue
		}
		if openDoorRe.MatchString(a) {
			continue // doors are open under the simplifications teleport needs
		}
		for cur != goldRoom {
			// random-direct: once the work has begun, a room the task names
			// is reached by one teleport (before it, a search of a named
			// room would tell where the thing is)
			if looked[goldRoom] || tour == TourRandomDirect && worked && strings.Contains(d.Desc, "the "+goldRoom) {
				done, err := do("teleport to " + goldRoom)
				if err != nil || done {
					return d, err
				}
				if cur != goldRoom {
					return d, fmt.Errorf("%w: %s/%d: teleport to %s failed (%q); explore demos need the teleport simplification", ErrDemo, task, variation, goldRoom, d.Steps[len(d.Steps)-1].Observation)
				}
				break
			}
			var unseen []string
			for _, r := range queue {
				if !looked[r] {
					unseen = append(unseen, r)
				}
			}
			next := ""
			if len(unseen) > 0 {
				next = unseen[0]
				if rng != nil {
					next = unseen[rng.IntN(len(unseen))]
				}
			}
			if next == "" {
				return d, fmt.Errorf("%w: %s/%d: searched every room without reaching %s", ErrDemo, task, variation, goldRoom)
			}
			if done, err := do("teleport to " + next); err != nil || done {
				return d, err
			}
			if cur != next {
				return d, fmt.Errorf("%w: %s/%d: teleport to %s failed (%q); explore demos need the teleport simplification", ErrDemo, task, variation, next, d.Steps[len(d.Steps)-1].Observation)
			}
			done, err := do("look around")
			if err != nil || done {
				return d, err
			}
			looked[next] = true
			for _, m := range doorRe.FindAllStringSubmatch(d.Steps[len(d.Steps)-1].Observation, -1) {
				enqueue(m[1])
			}
		}
		done, err := do(a)
		if err != nil || done {
			return d, err
		}
		worked = true
	}
	return d, nil
}

// namedRooms returns the rooms (among the doors seen) named in the task
// description, in order of mention.
func namedRooms(desc string, doors [][]string) []string {
	type pos struct {
		r string
		i int
	}
	var ps []pos
	for _, m := range doors {
		if i := strings.Index(desc, "the "+m[1]); i >= 0 {
			ps = append(ps, pos{m[1], i})
		}
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].i < ps[j-1].i; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.r
	}
	return out
}

// Tip derives the tip an agent could write after the episode: which
// rooms it looked at, which steps earned (or lost) score and where, and
// whether the task was completed (at most rollout.MaxTipWords words). It
// states no point values and no final score: the chat the policy writes
// its tip after shows neither (observations carry no score), so a model
// taught to write them can only guess, and the memory entry states the
// final score anyway (rollout.TipContent).
func Tip(d Demo) string {
	var b strings.Builder
	var rooms []string
	seen := map[string]bool{}
	prev := firstRoom(d.FirstObs)
	for _, s := range d.Steps {
		r := ""
		if d.Kind == KindExplore {
			if s.Action == "look around" {
				r = s.Room
			}
		} else if s.Room != prev {
			r = s.Room
		}
		prev = s.Room
		if r != "" && !seen[r] {
			seen[r] = true
			rooms = append(rooms, "the "+r)
		}
	}
	if len(rooms) > 0 {
		verb := "I went to "
		if d.Kind == KindExplore {
			verb = "I looked around "
		}
		b.WriteString(verb + joinAnd(rooms) + ". ")
	} else if len(d.Steps) > 0 { // no rooms (e.g. WebShop): the actions themselves
		acts := d.Actions()
		if len(acts) > 6 {
			acts = append(acts[:5:5], "…")
		}
		b.WriteString("I tried " + strings.Join(acts, ", ") + ". ")
	}
	var gains, losses []string
	for _, s := range d.Steps {
		if s.Reward == 0 {
			continue
		}
		g := s.Action
		if s.Room != "" {
			g += " in the " + s.Room
		}
		if s.Reward > 0 {
			gains = append(gains, g)
		} else {
			losses = append(losses, g)
		}
	}
	if len(gains) > 0 {
		b.WriteString("Score came from " + joinAnd(gains) + ". ")
	} else {
		b.WriteString("No action earned score. ")
	}
	if len(losses) > 0 {
		b.WriteString("Score was lost at " + joinAnd(losses) + ". ")
	}
	switch {
	case d.Score >= 100:
		b.WriteString("The task is complete.")
	case d.Score < 0:
		b.WriteString("The episode failed.")
	default:
		b.WriteString("The task is not complete.")
	}
	return rollout.CleanTip(b.String())
}

func fmtScore(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// Config says how demos become chat records.
type Config struct {
	Prompt  rollout.PromptConfig
	PerStep bool // one record per step (required for history last-k); else one packed record per episode
	NoTips  bool // leave out the tip-writing turn
}

// Records turns a demo into chat records in the rollouts' prompt format.
// Packed (full history only): rollout.Messages of the whole episode, every
// action an assistant message, and the tip turn (rollout.TipMessages + the
// tip) at the end. Per step: for step i, Messages(turns[:i]) + the action;
// then one record with the tip turn.
func Records(d Demo, cfg Config) ([]sft.ChatRecord, error) {
	pc, err := cfg.Prompt.Normalize()
	if err != nil {
		return nil, err
	}
	if len(d.Steps) == 0 {
		return nil, fmt.Errorf("%w: %s/%d has no steps", ErrDemo, d.Task, d.Variation)
	}
	turns := actionTurns(pc, d)
	meta := func(extra ...any) map[string]any {
		m := map[string]any{"env": d.Env, "task": d.Task, "variation": d.Variation, "kind": d.Kind, "score": d.Score, "done": d.Done}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	tip := Tip(d)
	var out []sft.ChatRecord
	if !cfg.PerStep && pc.History != rollout.HistoryFull {
		return nil, fmt.Errorf("%w: packed demos need history %q (a last-k prompt changes every step); use per-step records", rollout.ErrPrompt, rollout.HistoryFull)
	}
	if !cfg.PerStep {
		var msgs []llama.Message
		if cfg.NoTips {
			msgs = rollout.Messages(pc, d.Desc, d.FirstObs, turns, "")
			msgs = msgs[:len(msgs)-1] // the last observation: nothing is predicted after it
		} else {
			msgs = append(rollout.TipMessages(pc, d.Desc, d.FirstObs, turns), llama.Message{Role: sft.RoleAssistant, Content: tip})
		}
		return []sft.ChatRecord{{Messages: msgs, Meta: meta("steps", len(turns))}}, nil
	}
	for i := range turns {
		msgs := rollout.Messages(pc, d.Desc, d.FirstObs, turns[:i], "")
		msgs = append(msgs, llama.Message{Role: sft.RoleAssistant, Content: turns[i].Action})
		out = append(out, sft.ChatRecord{Messages: msgs, Meta: meta("step", i+1)})
	}
	if !cfg.NoTips {
		msgs := append(rollout.TipMessages(pc, d.Desc, d.FirstObs, turns), llama.Message{Role: sft.RoleAssistant, Content: tip})
		out = append(out, sft.ChatRecord{Messages: msgs, Meta: meta("tip", true)})
	}
	return out, nil
}
