package demos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// Demonstrations whose prompts carry retrieved tips (`empo2 env demos
// --tip-records N`). A model fine-tuned only on tip-free prompts has never
// seen a tip block; at RL time EMPO²'s memory steps put one at the end of
// every prompt and such a model is derailed by it (docs/results.md: the
// reduced study's memory-on scores were 0). These records show it tip
// blocks as the trainer builds them, retrieved from a memory that looks
// like the one RL builds:
//
//   - per demonstration, cfg.Failures failed attempts at the same
//     variation: the demo's first j actions (j drawn uniformly in
//     [0, len)), then random valid actions until the episode ends or
//     FailureSteps more were taken. Their tips (Tip) say how far they
//     got; their entries carry their (low) final score.
//   - the demonstration itself, a successful earlier attempt (score 100).
//
// Entries are rollout.EpisodeEntries (key: the episode's final
// conversation, or each step's rollout.MemoryKey with cfg.Key
// "observation"; content: rollout.TipContent), stored in a per-variation
// namespace exactly as WriteTips stores the RL episodes' tips. For
// cfg.Records steps of the demo (drawn without replacement) one per-step
// record is written: the prompt of that step (rollout.Messages with its
// history) with, as the rollouts put them, the tips retrieved for the key
// of every step up to it (cfg.TopK above cfg.Threshold, best-scored first
// and ties oldest first, rollout.FormatTips) at the end of the user message
// each step answered (cfg.TipsIn "last-turn": only the last), and the
// demo's action as the answer. Records alternate between two memories: one with
// the successful demo (the answer is then also the top tip's action) and
// one with only the failed attempts (their actions are often wrong: the
// answer is the demo's, not the tip's), so the model learns to follow a
// tip from a successful episode and to act on its own otherwise. A record
// whose retrieval finds nothing is not written.
//
// With cfg.FailureTips each failed attempt also gives its tip-writing
// record (rollout.TipMessages of the attempt + its Tip, the tip alone
// trained: sft.LastOnly): the demos' own tip turns only show complete,
// successful episodes, while the policy writes most of its tips at RL time
// after failures.

// TipRecordConfig says how TipRecords builds records with tips.
type TipRecordConfig struct {
	Prompt       rollout.PromptConfig
	Records      int     // records per demo (at most the demo's steps); 0 = none
	Failures     int     // failed attempts played per demo
	FailureSteps int     // random actions after a failed attempt's prefix
	TopK         int     // tips per prompt (memory.top_k)
	Threshold    float64 // retrieval cosine threshold (memory.threshold)
	// Key and TipsIn are memory.key and memory.tips_in (DefaultTipRecordConfig:
	// rollout.DefaultMemoryConfig's). The store given to TipRecords
	// must embed as the trainer's does (rollout.OpenEmbedder of the same
	// memory section: the hash embedder reads the first key_pieces pieces).
	Key         rollout.KeyKind
	TipsIn      rollout.TipsIn
	Seed        int64 // reset seed of the demo (the failed attempts replay it) and of the draws
	FailureTips bool  // also write each failed attempt's tip-writing turn (rollout.TipMessages + its Tip)
	// ReadTrials (read records only): 0 = every record retrieves from one
	// memory of all the demo's attempts and the demo; n ≥ 1 = each record
	// retrieves from a memory of its own holding at most n episodes, as the
	// memory of an adaptation trial k holds the k−1 before it (ReadRecords).
	ReadTrials int
	// ReadShort (read records only): each record keeps the task's first
	// turn (its answer as context) and the record's own turn with its
	// block; the turns between are dropped (shortPrompt). Many short
	// records cost the tokens of one full-history record each.
	ReadShort bool
	// WrongTips (read records only, not OwnReadRecords): the probability
	// that a stored episode (the demo or a deviating attempt) shows the
	// tip of another of the demo's episodes instead of its own, so that
	// only the code-written action and score say what to do, as with a
	// policy's own, often false, tips (0: every tip its episode's own).
	WrongTips float64
}

// DefaultTipRecordConfig: no records; when asked for, 2 failed attempts of
// up to 8 random actions per demo, retrieval as the memory section's
// defaults (top_k, threshold, key, tips_in), the default prompt.
func DefaultTipRecordConfig() TipRecordConfig {
	m := rollout.DefaultMemoryConfig()
	return TipRecordConfig{Prompt: rollout.DefaultPromptConfig(), Failures: 2, FailureSteps: 8, TopK: m.TopK, Threshold: m.Threshold,
		Key: m.Key, TipsIn: m.TipsIn}
}

// Check validates c; with Records 0 (no tip records) only that
// FailureTips is off. Errors name the setting and the value.
func (c TipRecordConfig) Check() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrDemo}, a...)...) }
	switch {
	case c.Records < 0:
		return bad("tip records %d: want ≥ 0", c.Records)
	case c.Records == 0 && c.FailureTips:
		return bad("failure tips need tip records (a count ≥ 1)")
	case c.Records == 0:
		return nil
	case !(c.WrongTips >= 0 && c.WrongTips <= 1):
		return bad("wrong tips %g: want a probability in [0, 1]", c.WrongTips)
	case c.ReadTrials < 0:
		return bad("read trials %d: want ≥ 0 (0: one memory of every attempt)", c.ReadTrials)
	case c.Failures < 1:
		return bad("tip failures %d: want at least 1 failed attempt per demo", c.Failures)
	case c.FailureSteps < 1:
		return bad("tip failure steps %d: want at least 1", c.FailureSteps)
	case c.TopK < 1:
		return bad("top-k %d: want at least 1 tip per prompt", c.TopK)
	case !(c.Threshold >= -1 && c.Threshold <= 1):
		return bad("threshold %g: want a cosine in [-1, 1]", c.Threshold)
	case !c.Key.Valid() || !c.TipsIn.Valid():
		return bad("key %q, tips_in %q: want memory.key and memory.tips_in values", c.Key, c.TipsIn)
	case c.Prompt.History != "" && c.Prompt.History != rollout.HistoryFull:
		return bad("tip records need history %s (the prompt of a step with tips must extend the history)", rollout.HistoryFull)
	}
	return nil
}

// prompt checks c and returns its normalized prompt format, which must
// keep the full history (what, e.g. "tip records", names the records in
// the error).
func (c TipRecordConfig) prompt(what string) (rollout.PromptConfig, error) {
	if err := c.Check(); err != nil {
		return rollout.PromptConfig{}, err
	}
	pc, err := c.Prompt.Normalize()
	if err != nil {
		return rollout.PromptConfig{}, err
	}
	if pc.History != rollout.HistoryFull {
		return rollout.PromptConfig{}, fmt.Errorf("%w: %s need history %q", rollout.ErrPrompt, what, rollout.HistoryFull)
	}
	return pc, nil
}

// stepKeys are the retrieval keys before each of a demo's actions and,
// last, after its final observation (rollout.StepKey, as in rollouts: the
// conversation so far with the actions as the policy writes them, or the
// task and the latest observation).
func stepKeys(pc rollout.PromptConfig, k rollout.KeyKind, d Demo) []string {
	turns := actionTurns(pc, d)
	keys := make([]string, len(d.Steps)+1)
	for i := range keys {
		keys[i] = rollout.StepKey(k, pc, d.Desc, d.FirstObs, turns[:i])
	}
	return keys
}

// demoEntries are the memory entries of a played episode
// (rollout.EpisodeEntries with its Tip): every step under the final
// conversation, or each under its own key (KeyObservation), as WriteTips
// stores them.
func demoEntries(pc rollout.PromptConfig, k rollout.KeyKind, d Demo, episode string) []memstore.Entry {
	return tipEntries(pc, k, d, Tip(d), episode)
}

// tipEntries is demoEntries with tip as every entry's tip instead of
// d's own (read records under TipRecordConfig.WrongTips).
func tipEntries(pc rollout.PromptConfig, k rollout.KeyKind, d Demo, tip, episode string) []memstore.Entry {
	keys := stepKeys(pc, k, d)
	steps := make([]rollout.TipStep, len(d.Steps))
	for i, s := range d.Steps {
		steps[i] = rollout.TipStep{Context: keys[i], Action: s.Action}
		if k == rollout.KeyConversation {
			steps[i].Context = keys[len(d.Steps)]
		}
	}
	return rollout.EpisodeEntries(tip, steps, d.Score, 0, episode)
}

// FailedAttempt replays the demo's first prefix actions, then takes up to
// steps random valid actions (rng) until the episode ends: an attempt at
// the same variation that goes astray.
func FailedAttempt(ctx context.Context, env environments.Env, d Demo, prefix, steps int, seed int64, rng *rand.Rand) (Demo, error) {
	if prefix < 0 || prefix > len(d.Steps) {
		panic(fmt.Sprintf("demos: FailedAttempt prefix %d of %d steps", prefix, len(d.Steps)))
	}
	return attempt(ctx, env, d, prefix, steps, seed, rng, "")
}

// attempt replays d's first prefix actions, then takes up to steps random
// valid actions (rng) until the episode ends; the first of them is not
// avoid when another valid action exists (avoid "": any).
func attempt(ctx context.Context, env environments.Env, d Demo, prefix, steps int, seed int64, rng *rand.Rand, avoid string) (Demo, error) {
	f, err := reset(ctx, env, d.Env, d.Task, d.Variation, seed, d.Kind)
	if err != nil {
		return f, err
	}
	if done, err := f.play(ctx, env, d.Actions()[:prefix]); err != nil || done {
		return f, err
	}
	for k := range steps {
		acts, err := env.ValidActions(ctx)
		if err != nil {
			return f, fmt.Errorf("%w: valid actions of %s/%d: %w", ErrDemo, d.Task, d.Variation, err)
		}
		if k == 0 && avoid != "" {
			other := make([]string, 0, len(acts))
			for _, a := range acts {
				if a != avoid {
					other = append(other, a)
				}
			}
			if len(other) > 0 {
				acts = other
			}
		}
		if len(acts) == 0 {
			break
		}
		sr, err := f.step(ctx, env, acts[rng.IntN(len(acts))])
		if err != nil {
			return f, err
		}
		if sr.Done {
			break
		}
	}
	return f, nil
}

// TipRecords plays cfg.Failures failed attempts at d's variation on env,
// stores them and d in mem (namespaces "fail|NS" and "all|NS", NS = the
// variation's RL namespace) and returns up to cfg.Records per-step records
// whose prompts carry the retrieved tips (see the comment above). mem must
// use the embedder the RL run will use for the records to show the tips it
// would retrieve.
func TipRecords(ctx context.Context, env environments.Env, d Demo, mem *memstore.Store, cfg TipRecordConfig) ([]sft.ChatRecord, error) {
	pc, err := cfg.prompt("tip records")
	if err != nil {
		return nil, err
	}
	if len(d.Steps) == 0 || cfg.Records == 0 {
		return nil, nil
	}
	ns := rollout.Job{Task: d.Task, Variation: d.Variation}.Namespace()
	rng := rand.New(rand.NewPCG(rollout.MixSeed(cfg.Seed, int64(d.Variation)), rollout.MixSeed(int64(len(d.Task)), int64(len(d.Steps)))))
	var out []sft.ChatRecord
	meta := func(m map[string]any) map[string]any {
		m["env"], m["task"], m["variation"], m["kind"] = d.Env, d.Task, d.Variation, d.Kind
		return m
	}
	for k := range cfg.Failures {
		f, err := FailedAttempt(ctx, env, d, rng.IntN(len(d.Steps)), cfg.FailureSteps, cfg.Seed, rng)
		if err != nil {
			return nil, err
		}
		if len(f.Steps) == 0 {
			continue
		}
		if cfg.FailureTips {
			msgs := append(rollout.TipMessages(pc, f.Desc, f.FirstObs, actionTurns(pc, f)), llama.Message{Role: sft.RoleAssistant, Content: Tip(f)})
			out = append(out, sft.LastOnly(msgs, meta(map[string]any{
				"score": f.Score, "done": f.Done, "steps": len(f.Steps), "tip": true, "failed": true})))
		}
		es := demoEntries(pc, cfg.Key, f, ns+"/fail"+strconv.Itoa(k))
		for _, space := range []string{"fail|" + ns, "all|" + ns} {
			if _, err := mem.Add(ctx, space, es); err != nil {
				return nil, fmt.Errorf("%w: storing tips: %w", ErrDemo, err)
			}
		}
	}
	if _, err := mem.Add(ctx, "all|"+ns, demoEntries(pc, cfg.Key, d, ns+"/demo")); err != nil {
		return nil, fmt.Errorf("%w: storing tips: %w", ErrDemo, err)
	}

	keys := stepKeys(pc, cfg.Key, d)
	turns := actionTurns(pc, d)
	steps := rng.Perm(len(d.Steps))[:min(cfg.Records, len(d.Steps))]
	first := rng.IntN(2) // which memory the first record uses
	q := memstore.Query{K: cfg.TopK, Threshold: float32(cfg.Threshold), Order: memstore.OrderByScoreStable}
	for r, i := range steps {
		space := "all"
		if (r+first)%2 == 1 {
			space = "fail"
		}
		// the tips of every step up to i, as the rollout retrieves them
		msgs, n, err := memoryPrompt(ctx, mem, space+"|"+ns, q, pc, cfg.TipsIn, d, keys, turns, i)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			continue
		}
		msgs = append(msgs, llama.Message{Role: sft.RoleAssistant, Content: turns[i].Action})
		out = append(out, sft.ChatRecord{Messages: msgs, Meta: meta(map[string]any{
			"score": d.Score, "done": d.Done, "step": i + 1, "tips": n, "memory": space})})
	}
	return out, nil
}

// actionTurns are the demo's turns with actions in the prompt's action format.
func actionTurns(pc rollout.PromptConfig, d Demo) []rollout.Turn {
	turns := d.Turns()
	if pc.ActionFormat == rollout.FormatCoT {
		for i := range turns {
			turns[i].Action = rollout.ActionOpen + turns[i].Action + rollout.ActionClose
		}
	}
	return turns
}
