package demos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// Memory-reading records (`empo2 env demos --read-records N`, issue 36):
// records that teach a policy to *use* a memory block, as instruction
// tuning teaches a large model to read "earlier attempts: action X, final
// score S". TipRecords shows tip blocks; these make the block decide the
// answer. Per demonstration:
//
//   - for each of N record steps i (drawn without replacement), one
//     attempt that replays the demo's first i actions and then *deviates*
//     at step i (a random valid action other than the demo's), then takes
//     random valid actions until the episode ends or cfg.FailureSteps
//     actions were taken in all after the prefix (DeviatingAttempt); plus
//     cfg.Failures attempts deviating at uniformly drawn steps. Their
//     entries carry their own final scores (−100 after a wrong focus, the
//     partial credit of where they got otherwise) and, at the state where
//     they deviated, an action that is not the demo's;
//   - the demonstration itself (score 100).
//
// Every attempt and the demo are stored exactly as WriteTips stores an
// episode (rollout.EpisodeEntries of its Tip: one entry per step, content
// = tip + the code-written action of that step + the final score), in two
// namespaces of mem: "read-all|NS" (the attempts, then the demo: high- and
// low-score entries mixed) and "read-fail|NS" (the attempts only). Record
// r retrieves from one of them in turn (the first drawn): the prompt of
// step i (rollout.Messages with the history, the tips of every earlier
// step kept under cfg.TipsIn every-turn), its block retrieved as the
// rollout retrieves (rollout.StepKey under cfg.Key, cfg.TopK above
// cfg.Threshold, by score with ties oldest first, rollout.FormatTips), and
// the demo's action as the one trained answer (sft.LastOnly: the history's
// actions are the demo record's to teach). With "read-all" the block's
// best-scored entries say what the successful episode did here, and the
// answer follows them; with "read-fail" the block holds only low-score
// entries, the deviation at this state among them, and the answer is not
// what the failed attempt did. A record whose retrieval finds nothing is
// not written.

// DeviatingAttempt replays the demo's first prefix actions, then takes a
// random valid action other than the demo's step-prefix action (any valid
// one when no other exists), then further random valid actions until the
// episode ends or steps actions were taken after the prefix.
func DeviatingAttempt(ctx context.Context, env environments.Env, d Demo, prefix, steps int, seed int64, rng *rand.Rand) (Demo, error) {
	if prefix < 0 || prefix >= len(d.Steps) || steps < 1 {
		panic(fmt.Sprintf("demos: DeviatingAttempt prefix %d of %d steps, %d steps", prefix, len(d.Steps), steps))
	}
	return attempt(ctx, env, d, prefix, steps, seed, rng, d.Steps[prefix].Action)
}

// ReadRecords plays d's deviating attempts on env, stores them and d in
// mem and returns up to cfg.Records memory-reading records (see the
// comment above; cfg.FailureTips is ignored: the attempts' tip turns are
// --attempt-tips' records). mem must embed as the RL run's memory does
// (rollout.OpenEmbedder of the same memory section).
func ReadRecords(ctx context.Context, env environments.Env, d Demo, mem *memstore.Store, cfg TipRecordConfig) ([]sft.ChatRecord, error) {
	p, err := newReadPlan(d, cfg)
	if p == nil || err != nil {
		return nil, err
	}
	rng := p.rng
	prefixes := append([]int(nil), p.steps...)
	for range cfg.Failures {
		prefixes = append(prefixes, rng.IntN(len(d.Steps)))
	}
	// attempts[k] is the entries of the attempt deviating at prefixes[k]
	// (nil when it took no step)
	played := make([]Demo, len(prefixes))
	for k, pre := range prefixes {
		f, err := DeviatingAttempt(ctx, env, d, pre, cfg.FailureSteps, cfg.Seed, rng)
		if err != nil {
			return nil, err
		}
		played[k] = f
	}
	attempts, demo := p.entries(played)
	if cfg.ReadTrials > 0 {
		return p.trialRecords(ctx, mem, attempts, demo)
	}
	all, fail := "read-all|"+p.ns, "read-fail|"+p.ns
	for _, es := range attempts {
		if es == nil {
			continue
		}
		for _, space := range []string{fail, all} {
			if _, err := mem.Add(ctx, space, es); err != nil {
				return nil, fmt.Errorf("%w: storing tips: %w", ErrDemo, err)
			}
		}
	}
	if _, err := mem.Add(ctx, all, demo); err != nil {
		return nil, fmt.Errorf("%w: storing tips: %w", ErrDemo, err)
	}
	first := rng.IntN(2)
	return p.records(ctx, mem, func(r int) (string, string) {
		if (r+first)%2 == 1 {
			return fail, "read-fail"
		}
		return all, "read-all"
	})
}

// entries are the memory entries of the deviating attempts played
// (attempts[k] is nil for an attempt that took no step) and of the demo,
// one entry per step (tipEntries), each episode with its own true tip —
// or, under cfg.WrongTips, with probability WrongTips the tip of another
// of these episodes whose tip text differs (drawn from a stream of its
// own, so that WrongTips 0 leaves every record as it was). An episode
// given a foreign tip has WrongTipSuffix on its entries' Episode.
func (p *readPlan) entries(played []Demo) (attempts [][]memstore.Entry, demo []memstore.Entry) {
	eps := append(append([]Demo(nil), played...), p.d) // the demo last; an attempt without steps stores nothing
	stored := func(i int) bool { return len(eps[i].Steps) > 0 }
	tips, shown, names := make([]string, len(eps)), make([]string, len(eps)), make([]string, len(eps))
	for i, e := range eps {
		tips[i], names[i] = Tip(e), p.ns+"/dev"+strconv.Itoa(i)
	}
	names[len(eps)-1] = p.ns + "/demo"
	copy(shown, tips)
	if p.cfg.WrongTips > 0 {
		wrng := rand.New(rand.NewPCG(rollout.MixSeed(p.cfg.Seed, int64(p.d.Variation)), rollout.MixSeed(int64(len(p.d.Task)), wrongTipStream)))
		for i := range eps {
			if !stored(i) || wrng.Float64() >= p.cfg.WrongTips {
				continue
			}
			var others []int
			for j := range eps {
				if stored(j) && tips[j] != tips[i] {
					others = append(others, j)
				}
			}
			if len(others) > 0 {
				shown[i], names[i] = tips[others[wrng.IntN(len(others))]], names[i]+WrongTipSuffix
			}
		}
	}
	attempts = make([][]memstore.Entry, len(played))
	for k := range played {
		if stored(k) {
			attempts[k] = tipEntries(p.pc, p.cfg.Key, eps[k], shown[k], names[k])
		}
	}
	last := len(eps) - 1
	return attempts, tipEntries(p.pc, p.cfg.Key, p.d, shown[last], names[last])
}

// WrongTipSuffix ends the Episode of a read-record memory entry whose tip
// is another episode's (TipRecordConfig.WrongTips).
const WrongTipSuffix = "/wrong-tip"

// wrongTipStream names the random stream of TipRecordConfig.WrongTips.
const wrongTipStream = 0x77726f6e67

// trialRecords is ReadRecords under cfg.ReadTrials n ≥ 1: record r
// retrieves from a memory of its own, as an adaptation trial's memory
// holds the trials before it. The records alternate (from a random first)
// between
//
//   - "read-all": the demo (score 100), and — with n ≥ 2, for every other
//     such record in a random phase — the attempt deviating at the
//     record's step stored before it (a failed trial, then a successful
//     one); the answer follows the demo's entry;
//   - "read-fail": the attempt deviating at the record's step, and — with
//     n ≥ 2, likewise — one of the other attempts (drawn) stored before it;
//     the block holds low-score entries only, the deviation at this state
//     among them, and the answer is not what it did.
//
// A record whose own attempt took no step gives no record.
func (p *readPlan) trialRecords(ctx context.Context, mem *memstore.Store, attempts [][]memstore.Entry, demo []memstore.Entry) ([]sft.ChatRecord, error) {
	rng, n := p.rng, p.cfg.ReadTrials
	first, phase := rng.IntN(2), rng.IntN(2)
	names := make([]string, len(p.steps))
	for r := range p.steps {
		own := attempts[r]
		if own == nil {
			continue
		}
		second := n >= 2 && (r/2+phase)%2 == 1
		var eps [][]memstore.Entry
		if (r+first)%2 == 1 {
			names[r] = "read-fail"
			if other := rng.IntN(len(attempts)); second && other != r && attempts[other] != nil {
				eps = append(eps, attempts[other])
			}
			eps = append(eps, own)
		} else {
			names[r] = "read-all"
			if second {
				eps = append(eps, own)
			}
			eps = append(eps, demo)
		}
		for _, es := range eps {
			if _, err := mem.Add(ctx, trialSpace(names[r], p.ns, r), es); err != nil {
				return nil, fmt.Errorf("%w: storing tips: %w", ErrDemo, err)
			}
		}
	}
	return p.records(ctx, mem, func(r int) (string, string) {
		if names[r] == "" {
			return "", ""
		}
		return trialSpace(names[r], p.ns, r), names[r]
	})
}

// trialSpace is the memory namespace of read record r of the demo with
// namespace ns under ReadTrials.
func trialSpace(name, ns string, r int) string { return name + "|" + ns + "|" + strconv.Itoa(r) }

// OwnReadRecords returns up to cfg.Records memory-reading records of d whose
// blocks come from an existing memory own — the policy's own earlier
// attempts at d's variation and the tips it wrote (a memory-only run's
// memory.db on the demos' variations) — instead of a memory built from the
// demo and attempts deviating from it (ReadRecords): the memory the policy
// meets when it adapts, answered with the demo's action (docs/experiment.md,
// Study 3, gate run 4). Steps are drawn as ReadRecords draws them; a step
// whose retrieval from d's namespace finds nothing gives no record.
func OwnReadRecords(ctx context.Context, d Demo, own *memstore.Store, cfg TipRecordConfig) ([]sft.ChatRecord, error) {
	p, err := newReadPlan(d, cfg)
	if p == nil || err != nil {
		return nil, err
	}
	return p.records(ctx, own, func(int) (string, string) { return p.ns, "own" })
}

// readPlan is what both read-record builders derive from a demo and their
// config: the checked prompt, the demo's memory namespace, and the record
// steps drawn first from the records' random stream (rng, which
// ReadRecords draws on).
type readPlan struct {
	d     Demo
	cfg   TipRecordConfig
	pc    rollout.PromptConfig
	ns    string
	rng   *rand.Rand
	steps []int
}

// newReadPlan returns d's plan, or nil when d gives no read records (no
// steps, or cfg.Records 0). cfg.FailureTips is ignored.
func newReadPlan(d Demo, cfg TipRecordConfig) (*readPlan, error) {
	cfg.FailureTips = false
	pc, err := cfg.prompt("read records")
	if err != nil {
		return nil, err
	}
	if len(d.Steps) == 0 || cfg.Records == 0 {
		return nil, nil
	}
	rng, steps := readDraws(d, cfg)
	return &readPlan{d: d, cfg: cfg, pc: pc, ns: rollout.Job{Task: d.Task, Variation: d.Variation}.Namespace(), rng: rng, steps: steps}, nil
}

// records writes the read record of every drawn step whose block,
// retrieved from mem's namespace space(r) for record r, is not empty; the
// record's meta names that memory.
func (p *readPlan) records(ctx context.Context, mem *memstore.Store, space func(r int) (ns, name string)) ([]sft.ChatRecord, error) {
	keys := stepKeys(p.pc, p.cfg.Key, p.d)
	turns := actionTurns(p.pc, p.d)
	q := memstore.Query{K: p.cfg.TopK, Threshold: float32(p.cfg.Threshold), Order: memstore.OrderByScoreStable}
	var out []sft.ChatRecord
	for r, i := range p.steps {
		ns, name := space(r)
		if ns == "" {
			continue
		}
		msgs, block, err := memoryBlock(ctx, mem, ns, q, p.pc, p.cfg.TipsIn, p.d, keys, turns, i)
		if err != nil {
			return nil, err
		}
		n := len(block)
		if n == 0 {
			continue
		}
		if p.cfg.ReadShort {
			if msgs = shortPrompt(msgs); msgs == nil {
				continue
			}
		}
		rec := readRecord(p.d, msgs, turns, i, n, name)
		if p.cfg.ReadShort {
			rec.Meta["short"] = true
		}
		if p.cfg.WrongTips > 0 {
			wrong := 0
			for _, m := range block {
				if strings.HasSuffix(m.Episode, WrongTipSuffix) {
					wrong++
				}
			}
			rec.Meta["wrong_tips"] = wrong
		}
		out = append(out, rec)
	}
	return out, nil
}

// shortPrompt is a read record's prompt under ReadShort: the system
// message (if any), the task's first user turn and its answer, and the
// last user turn (the record's step, with its block); nil when the last
// user turn is the first (nothing to drop, and no answer to keep).
func shortPrompt(msgs []llama.Message) []llama.Message {
	first := 0
	if len(msgs) > 0 && msgs[0].Role == sft.RoleSystem {
		first = 1
	}
	if len(msgs)-1 <= first+1 {
		return nil
	}
	out := append([]llama.Message(nil), msgs[:first+2]...)
	return append(out, msgs[len(msgs)-1])
}

// readDraws is the random stream of d's read records — one of its own
// (TipRecords' and AttemptTipRecords' draws stay as they were) — and the
// record steps drawn first from it, without replacement.
func readDraws(d Demo, cfg TipRecordConfig) (*rand.Rand, []int) {
	rng := rand.New(rand.NewPCG(rollout.MixSeed(cfg.Seed, int64(d.Variation)), rollout.MixSeed(int64(len(d.Task)), int64(len(d.Steps))+2<<32)))
	return rng, rng.Perm(len(d.Steps))[:min(cfg.Records, len(d.Steps))]
}

// readRecord is the read record of d's step i: the prompt msgs (with a
// block of n tips from memory), answered with the demo's action, the
// only trained message.
func readRecord(d Demo, msgs []llama.Message, turns []rollout.Turn, i, n int, memory string) sft.ChatRecord {
	msgs = append(msgs, llama.Message{Role: sft.RoleAssistant, Content: turns[i].Action})
	return sft.LastOnly(msgs, map[string]any{
		"env": d.Env, "task": d.Task, "variation": d.Variation, "kind": d.Kind,
		"score": d.Score, "done": d.Done, "step": i + 1, "tips": n, "memory": memory, "read": true})
}

// memoryPrompt is the prompt of the demo's step i as a rollout with memory
// renders it: the tips retrieved from namespace space for the key of every
// step up to i (only step i's under tips_in last-turn) at the end of the
// user message that step answers. n is the number of tips in step i's block
// (0: none, and no prompt is worth writing).
func memoryPrompt(ctx context.Context, mem *memstore.Store, space string, q memstore.Query, pc rollout.PromptConfig,
	tipsIn rollout.TipsIn, d Demo, keys []string, turns []rollout.Turn, i int) (msgs []llama.Message, n int, err error) {
	msgs, block, err := memoryBlock(ctx, mem, space, q, pc, tipsIn, d, keys, turns, i)
	return msgs, len(block), err
}

// memoryBlock is memoryPrompt with step i's retrieved entries (block)
// instead of their number.
func memoryBlock(ctx context.Context, mem *memstore.Store, space string, q memstore.Query, pc rollout.PromptConfig,
	tipsIn rollout.TipsIn, d Demo, keys []string, turns []rollout.Turn, i int) (msgs []llama.Message, block []memstore.Match, err error) {
	blocks := make([]string, i+1)
	for j := range blocks {
		if j < i && tipsIn != rollout.TipsEveryTurn {
			continue
		}
		res, err := mem.RetrieveText(ctx, space, keys[j], q)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: retrieval: %w", ErrDemo, err)
		}
		blocks[j], block = rollout.FormatTips(res.Entries), res.Entries
	}
	if len(block) == 0 {
		return nil, nil, nil
	}
	shown := append([]rollout.Turn(nil), turns[:i]...)
	for j := range shown {
		shown[j].Tips = blocks[j]
	}
	return rollout.Messages(pc, d.Desc, d.FirstObs, shown, blocks[i]), block, nil
}
