package demos

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// Tip-writing records after attempts that go astray (`empo2 env demos
// --attempt-tips N`). A demo's own tip turn only ever follows a complete,
// successful episode, while at RL time the policy writes its tips after
// its own episodes: mostly partial ones that wander until the step limit,
// or failures. Each attempt replays the demo's first j actions (j uniform
// in [0, len)), then takes random valid actions until the episode ends or
// reaches the step limit (FailedAttempt), and its record is the tip
// request after the attempt (rollout.TipMessages) answered with Tip of the
// attempt: a true tip about a partial or failed trajectory, as cheap to
// make as the demo itself. Only the tip is trained (sft.LastOnly): the
// attempt's actions, random ones among them, are the record's context,
// which an SFT that trained every assistant turn would teach as actions.

// AttemptTipRecords plays n attempts at d's variation on env (limit: the
// task's step limit) and returns their tip-writing records; seed drives the
// draws (and is the reset seed, as in TipRecords).
func AttemptTipRecords(ctx context.Context, env environments.Env, d Demo, n, limit int, pc rollout.PromptConfig, seed int64) ([]sft.ChatRecord, error) {
	if n < 0 || limit < 1 {
		return nil, fmt.Errorf("%w: attempt tips: %d attempts, step limit %d", optim.ErrConfig, n, limit)
	}
	pc, err := pc.Normalize()
	if err != nil {
		return nil, err
	}
	if len(d.Steps) == 0 || n == 0 {
		return nil, nil
	}
	// a stream of its own: the draws of TipRecords stay as they were
	rng := rand.New(rand.NewPCG(rollout.MixSeed(seed, int64(d.Variation)), rollout.MixSeed(int64(len(d.Task)), int64(len(d.Steps))+1<<32)))
	var out []sft.ChatRecord
	for range n {
		prefix := rng.IntN(min(len(d.Steps), limit))
		f, err := FailedAttempt(ctx, env, d, prefix, limit-prefix, seed, rng)
		if err != nil {
			return nil, err
		}
		if len(f.Steps) == 0 {
			continue
		}
		msgs := append(rollout.TipMessages(pc, f.Desc, f.FirstObs, actionTurns(pc, f)), llama.Message{Role: sft.RoleAssistant, Content: Tip(f)})
		out = append(out, sft.LastOnly(msgs, map[string]any{
			"env": d.Env, "task": d.Task, "variation": d.Variation, "kind": d.Kind,
			"score": f.Score, "done": f.Done, "steps": len(f.Steps), "tip": true, "attempt": true}))
	}
	return out, nil
}
