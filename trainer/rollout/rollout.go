package rollout

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
)

// Rollouts (EMPO² §3). A Roller plays many episodes at
// once against one llama.Context: every active episode owns a KV sequence
// (a slot, llama.GenerateSlots) for its whole life, and every turn one
// batched decode serves all active episodes:
//
//	for each turn:
//	  [memory episodes] key_i = the conversation so far (memory.key
//	                    conversation; or task + latest observation) → embed,
//	                    retrieve (namespace task/variation, cosine >
//	                    threshold, top-k by stored score, ties oldest first)
//	                    → tip block at the end of the latest user message
//	                    (every-turn: earlier user messages keep theirs)
//	  prompt_i = Renderer(Messages(history_i, tips_i))      (full history)
//	  GenerateSlots(all i): decode only what slot_i's KV lacks, then sample
//	                    all responses together (raw log-probs = π_old)
//	  env_i.Step(ParseAction(response_i))                   (in parallel)
//
// When an episode ends its slot goes to the next job (continuous batching).
// After training episodes, WriteTips asks the policy for a one-sentence tip
// in a new user turn after each episode's chat (batched the same way) and
// stores one memory entry per step (EMPO² §3.2).

// Errors of the rollout engine.
var (
	ErrRollout = errors.New("trainer: rollout")
	// ErrNoMemory: a memory job or WriteTips without a memory store, or
	// WriteTips on a read-only one.
	ErrNoMemory = errors.New("trainer: no writable memory store")
)

// Options are the Roller's resources and run-level settings.
type Options struct {
	// Env is the environment's registry name (tasks, step limits, and new
	// instances when Pool is nil); EnvOptions are passed to it.
	Env        string
	EnvOptions environments.Options
	// Pool, when set, lends the instances (one per active episode);
	// otherwise each episode makes its own and closes it at its end.
	Pool *environments.Pool
	// Memory is the tips store (retrieval embeds with its embedder). nil:
	// memory jobs and WriteTips fail with ErrNoMemory.
	Memory *memstore.Store
	// MemoryConfig is the memory section: the key, retrieval (threshold,
	// top_k), where tips stay (tips_in), the intrinsic reward
	// (intrinsic_coef) and the embedder's name (the store embeds with
	// OpenEmbedder's embedder). Checked by MemoryConfig.Validate.
	MemoryConfig MemoryConfig
	// ReadOnlyMemory makes WriteTips fail (eval without --write-tips).
	ReadOnlyMemory bool
	// OracleTip writes the oracle tip of a finished episode; required by
	// Config.OracleTips (the caller supplies trainer/demos.TrajectoryTip:
	// rollout does not import the demos).
	OracleTip func(environments.Trajectory) string
	// Seed is the run seed; an episode samples with MixSeed(Seed, Job.Seed).
	Seed int64
	// Progress, when set, is called after every finished episode.
	Progress func(done, total int)
}

// Roller plays episodes; see the file comment. Not safe for concurrent
// Runs (they share the context's slots).
type Roller struct {
	lctx  *llama.Context
	rend  *Renderer
	cfg   Config
	opts  Options
	spec  environments.Spec
	tasks map[string]environments.Task

	tipsDur time.Duration // of the last WriteTips
}

// NewRoller makes a Roller over lctx (the policy's inference context with
// its adapter attached; at most lctx.NSeqMax() episodes are active at a
// time). Settings are used as given (Temperature 0 = greedy) and checked:
// TipMaxTokens ≥ 1, a finite SuccessScore, o.MemoryConfig.Validate. The
// environment's defaults fill CorrectInvalid auto and SuccessScore 0.
func NewRoller(lctx *llama.Context, cfg Config, o Options) (*Roller, error) {
	if lctx == nil {
		return nil, fmt.Errorf("%w: nil llama context", ErrRollout)
	}
	if err := o.MemoryConfig.Validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.TipMaxTokens < 1 || cfg.StepLimit < 0:
		return nil, fmt.Errorf("%w: tip_max_tokens %d (want ≥ 1) or step_limit %d (want ≥ 0)", ErrRollout, cfg.TipMaxTokens, cfg.StepLimit)
	case cfg.Temperature < 0 || cfg.Temperature > 100:
		return nil, fmt.Errorf("%w: temperature %v", ErrRollout, cfg.Temperature)
	case cfg.TipTemperature > 100 || math.IsNaN(cfg.TipTemperature):
		return nil, fmt.Errorf("%w: tip temperature %v", ErrRollout, cfg.TipTemperature)
	case math.IsNaN(cfg.SuccessScore) || math.IsInf(cfg.SuccessScore, 0):
		return nil, fmt.Errorf("%w: success score %v is not a finite number", ErrRollout, cfg.SuccessScore)
	case !cfg.CorrectInvalid.Valid():
		return nil, fmt.Errorf("%w: correct_invalid %q (want auto, on or off)", ErrRollout, cfg.CorrectInvalid)
	case cfg.OracleTips && o.OracleTip == nil:
		return nil, fmt.Errorf("%w: oracle_tips needs the oracle tip writer (Options.OracleTip)", ErrRollout)
	}
	rend, err := NewRenderer(lctx.Model(), cfg.Prompt)
	if err != nil {
		return nil, err
	}
	cfg.Prompt = rend.Config()
	spec, err := environments.Lookup(o.Env)
	if err != nil {
		return nil, err
	}
	// The environment's defaults fill what the run leaves to it.
	if cfg.CorrectInvalid.Enabled(spec.Defaults) {
		cfg.CorrectInvalid = CorrectOn
	} else {
		cfg.CorrectInvalid = CorrectOff
	}
	if cfg.SuccessScore == 0 {
		cfg.SuccessScore = spec.Defaults.Success()
	}
	list, err := spec.Tasks(o.EnvOptions)
	if err != nil {
		return nil, fmt.Errorf("%w: listing %s tasks: %w", ErrRollout, o.Env, err)
	}
	tasks := make(map[string]environments.Task, len(list))
	for _, t := range list {
		tasks[t.Name] = t
	}
	return &Roller{lctx: lctx, rend: rend, cfg: cfg, opts: o, spec: spec, tasks: tasks}, nil
}

// Config is the roller's (completed) configuration.
func (r *Roller) Config() Config { return r.cfg }

// MemoryConfig is the roller's (completed) memory configuration.
func (r *Roller) MemoryConfig() MemoryConfig { return r.opts.MemoryConfig }

// SuccessScore is the score at which an episode succeeds (Succeeded).
func (r *Roller) SuccessScore() float64 { return r.cfg.SuccessScore }

// Renderer is the roller's prompt renderer.
func (r *Roller) Renderer() *Renderer { return r.rend }

// Tasks lists the environment's tasks.
func (r *Roller) Tasks() []environments.Task {
	out := make([]environments.Task, 0, len(r.tasks))
	for _, t := range r.tasks {
		out = append(out, t)
	}
	return out
}

// WithMemory returns a copy of r that retrieves from (and, unless
// readOnly, writes tips to) s instead; nil s turns memory off.
func (r *Roller) WithMemory(s *memstore.Store, readOnly bool) *Roller {
	c := *r
	c.opts.Memory, c.opts.ReadOnlyMemory = s, readOnly
	return &c
}

// WithTemperature returns a copy of r sampling at t (eval: 0.4).
func (r *Roller) WithTemperature(t float64) *Roller {
	c := *r
	c.cfg.Temperature = t
	return &c
}

// WithProgress returns a copy of r that calls f after every finished
// episode (nil: none).
func (r *Roller) WithProgress(f func(done, total int)) *Roller {
	c := *r
	c.opts.Progress = f
	return &c
}

// PromptFit is the first prompt of an episode against its context.
type PromptFit struct {
	Prompt    int // tokens of the first prompt (no tips)
	MaxAction int // max_action_tokens
	Context   int // tokens per episode
}

// Fits reports whether the episode can take its first action.
func (f PromptFit) Fits() bool { return f.Prompt+f.MaxAction <= f.Context }

// FirstPrompt renders the first prompt of an episode of task/variation (no
// tips) and measures it against the context: an episode whose first
// prompt does not fit ends before its first action (End "context").
func (r *Roller) FirstPrompt(ctx context.Context, task string, variation int) (PromptFit, error) {
	fit := PromptFit{MaxAction: r.cfg.Prompt.MaxActionTokens, Context: r.lctx.NCtxSeq()}
	var env environments.Env
	var err error
	if r.opts.Pool != nil { // an instance of the pool, not one more (ScienceWorld: a JVM)
		if env, err = r.opts.Pool.Acquire(ctx); err == nil {
			defer r.opts.Pool.Release(env)
		}
	} else if env, err = r.spec.New(r.opts.EnvOptions); err == nil {
		defer env.Close()
	}
	if err != nil {
		return fit, fmt.Errorf("%w: environment for %s/%d: %w", ErrRollout, task, variation, err)
	}
	res, err := env.Reset(ctx, task, variation, 0)
	if err != nil {
		return fit, fmt.Errorf("%w: reset %s/%d: %w", ErrRollout, task, variation, err)
	}
	ct, err := r.rend.Tokens(Messages(r.cfg.Prompt, res.TaskDescription, res.Observation, nil, ""), true)
	if err != nil {
		return fit, err
	}
	fit.Prompt = len(ct.Tokens)
	return fit, nil
}

// Memory is the roller's tips store (nil when none).
func (r *Roller) Memory() *memstore.Store { return r.opts.Memory }

// live is an episode in play.
type live struct {
	ep        *Episode
	env       environments.Env
	pooled    bool
	broken    bool // the environment failed (EndError): replace or close it
	turns     []Turn
	responses [][]int32 // sampled tokens of each turn, without a final EOG token
	limit     int
	prev      []int32 // the previous turn's prompt and response
	// this turn
	prompt ChatTokens
	noTips []int32 // the prompt rendered without tips (nil: it has none)
	key    string
	count  int
	tips   string
}

// MixSeed derives a sampler seed from the run seed and a job seed (FNV-1a
// over their little-endian bytes).
func MixSeed(a, b int64) uint64 {
	h := fnv.New64a()
	var buf [16]byte
	for i := 0; i < 8; i++ {
		buf[i] = byte(a >> (8 * i))
		buf[8+i] = byte(b >> (8 * i))
	}
	h.Write(buf[:])
	return h.Sum64()
}

// Run plays jobs (see the file comment) and returns their episodes in job
// order. Sampling is deterministic for fixed seeds: each episode samples
// turn t from its own generator (Options.Seed, Job.Seed; stream t),
// whatever else runs beside it.
func (r *Roller) Run(ctx context.Context, jobs []Job) ([]Episode, Stats, error) {
	t0 := time.Now()
	var st Stats
	for i, j := range jobs {
		if _, ok := r.tasks[j.Task]; !ok {
			return nil, st, fmt.Errorf("%w: job %d: %w: %q", ErrRollout, i, environments.ErrUnknownTask, j.Task)
		}
		if err := environments.CheckVariation(r.tasks[j.Task], j.Variation); err != nil {
			return nil, st, fmt.Errorf("%w: job %d: %w", ErrRollout, i, err)
		}
		if j.Mode.Memory() && r.opts.Memory == nil {
			return nil, st, fmt.Errorf("%w: job %d uses memory", ErrNoMemory, i)
		}
	}
	eps := make([]Episode, len(jobs))
	w := watch.From(ctx) // progress: tokens per decode, episodes as they finish
	nSlots := r.lctx.NSeqMax()
	if r.opts.Pool != nil {
		// one instance per active episode: never wait on the pool
		nSlots = min(nSlots, r.opts.Pool.Size())
	}
	free := make([]int, 0, nSlots)
	for s := nSlots - 1; s >= 0; s-- {
		free = append(free, s)
	}
	var active []*live
	next, finished := 0, 0
	release := func(l *live) error {
		free = append(free, l.ep.slot)
		switch {
		case l.env == nil:
			return nil
		case l.pooled && l.broken:
			return r.opts.Pool.Replace(l.env)
		case l.pooled:
			return r.opts.Pool.Release(l.env)
		case l.broken:
			_ = l.env.Close() // dead: its close error says nothing new
			return nil
		}
		return l.env.Close()
	}
	defer func() {
		for _, l := range active {
			_ = release(l)
		}
	}()
	for next < len(jobs) || len(active) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		// start jobs while slots are free
		var starting []*live
		for next < len(jobs) && len(free) > 0 {
			l := &live{ep: &eps[next]}
			eps[next].Job = jobs[next]
			eps[next].slot = free[len(free)-1]
			free = free[:len(free)-1]
			next++
			starting = append(starting, l)
			active = append(active, l)
		}
		if err := r.startAll(ctx, starting); err != nil {
			return nil, st, err
		}
		playing := make([]*live, 0, len(active))
		for _, l := range active {
			if l.ep.End == "" { // not failed at its start
				playing = append(playing, l)
			}
		}
		// prompts (with retrieval for memory episodes)
		if err := r.retrieve(ctx, playing, &st); err != nil {
			return nil, st, err
		}
		var turn []*live
		var reqs []llama.SlotRequest
		for _, l := range playing {
			if err := r.render(l); err != nil {
				return nil, st, err
			}
			if len(l.prompt.Tokens)+r.cfg.Prompt.MaxActionTokens > r.lctx.NCtxSeq() {
				l.ep.End = EndContext
				continue
			}
			st.PromptTokensUnique += len(l.prompt.Tokens) - commonPrefix(l.prev, l.prompt.Tokens)
			turn = append(turn, l)
			reqs = append(reqs, llama.SlotRequest{
				Slot: l.ep.slot, Prompt: l.prompt.Tokens,
				Seed: MixSeed(r.opts.Seed, l.ep.Seed), Stream: len(l.ep.Steps),
			})
		}
		if len(reqs) > 0 {
			seqs, err := r.lctx.GenerateSlots(ctx, reqs, llama.SampleParams{
				Temperature: float32(r.cfg.Temperature), MaxTokens: r.cfg.Prompt.MaxActionTokens,
			})
			if err != nil {
				return nil, st, fmt.Errorf("%w: %w", ErrRollout, err)
			}
			ss := r.lctx.LastSlotStats()
			st.PromptTokensSeen += ss.PromptSeen
			st.PromptTokensDecoded += ss.PromptDecoded
			st.GenTokens += ss.Generated
			w.Tokens(ss.Generated)
			if err := r.stepAll(ctx, turn, seqs); err != nil {
				return nil, st, err
			}
			st.EnvSteps += len(turn)
		}
		// retire finished episodes
		kept := active[:0]
		for _, l := range active {
			if l.ep.End == "" {
				kept = append(kept, l)
				continue
			}
			r.finish(l)
			if err := release(l); err != nil {
				return nil, st, fmt.Errorf("%w: releasing an environment: %w", ErrRollout, err)
			}
			finished++
			w.Add(1)
			if r.opts.Progress != nil {
				r.opts.Progress(finished, len(jobs))
			}
		}
		active = kept
	}
	st.Episodes = len(eps)
	st.TRollout = time.Since(t0)
	return eps, st, nil
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// startAll acquires an environment for each new episode and resets it.
func (r *Roller) startAll(ctx context.Context, ls []*live) error {
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.start(ctx, l)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Roller) start(ctx context.Context, l *live) error {
	j := l.ep.Job
	var err error
	if r.opts.Pool != nil {
		l.env, err = r.opts.Pool.Acquire(ctx)
		l.pooled = err == nil
	} else {
		l.env, err = r.spec.New(r.opts.EnvOptions)
	}
	if err != nil {
		return fmt.Errorf("%w: environment for %s/%d: %w", ErrRollout, j.Task, j.Variation, err)
	}
	res, err := l.env.Reset(ctx, j.Task, j.Variation, j.Seed)
	if r.envFailed(ctx, l, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: reset %s/%d: %w", ErrRollout, j.Task, j.Variation, err)
	}
	l.ep.TaskDesc, l.ep.FirstObs = res.TaskDescription, res.Observation
	l.limit = environments.StepLimit(r.tasks[j.Task], r.opts.EnvOptions)
	if r.cfg.StepLimit > 0 {
		l.limit = r.cfg.StepLimit
	}
	return nil
}

// MemoryKey is the retrieval key of a context under memory.key
// "observation": the task and the latest observation (the state the agent
// is in), tips excluded.
func MemoryKey(taskDesc, obs string) string {
	return "Task: " + strings.TrimSpace(taskDesc) + "\n" + strings.TrimSpace(obs)
}

// StepKey is the retrieval key before the next action of an episode that
// began with (taskDesc, firstObs) and played turns: the conversation so far
// (ConversationKey of its Messages) or, with KeyObservation, the task and
// the latest observation (MemoryKey). Under KeyConversation the key after
// the last turn is the key every entry of the episode is stored under.
func StepKey(k KeyKind, pc PromptConfig, taskDesc, firstObs string, turns []Turn) string {
	if k == KeyObservation {
		obs := firstObs
		if n := len(turns); n > 0 {
			obs = turns[n-1].Observation
		}
		return MemoryKey(taskDesc, obs)
	}
	return ConversationKey(Messages(pc, taskDesc, firstObs, turns, ""))
}

// retrieve computes every active episode's key and, for memory episodes,
// its tips (one batched embedding call).
func (r *Roller) retrieve(ctx context.Context, active []*live, st *Stats) error {
	var qs []memstore.TextQuery
	var who []*live
	mc := r.opts.MemoryConfig
	for _, l := range active {
		l.count, l.tips = 0, ""
		l.key = StepKey(mc.Key, r.cfg.Prompt, l.ep.TaskDesc, l.ep.FirstObs, l.turns)
		if l.ep.Mode.Memory() {
			qs = append(qs, memstore.TextQuery{Namespace: l.ep.Namespace(), Text: l.key})
			who = append(who, l)
		}
	}
	if len(qs) == 0 {
		return nil
	}
	t0 := time.Now()
	res, err := r.opts.Memory.RetrieveTexts(ctx, qs, mc.Query())
	st.TEmbedRetrieve += time.Since(t0)
	if err != nil {
		return fmt.Errorf("%w: retrieval: %w", ErrRollout, err)
	}
	for i, l := range who {
		l.count = len(res[i].Entries) // the tips shown (≤ top_k), as the reference counts them
		l.tips = FormatTips(res[i].Entries)
	}
	return nil
}

// render tokenizes an episode's next prompt (the tips of earlier turns
// stay when they are in the turns: memory.tips_in every-turn) and, when it
// has tips, the same chat without any (the off-policy training input).
func (r *Roller) render(l *live) error {
	turns, resps := l.turns, l.responses
	pc := r.cfg.Prompt
	if pc.History == HistoryLast && len(turns) > pc.HistoryK {
		resps = resps[len(turns)-pc.HistoryK:]
	}
	msgs := Messages(pc, l.ep.TaskDesc, l.ep.FirstObs, turns, l.tips)
	ct, err := r.rend.TokensWithResponses(msgs, resps, true)
	if err != nil {
		return fmt.Errorf("%w: rendering %s/%d: %w", ErrRollout, l.ep.Task, l.ep.Variation, err)
	}
	l.prompt, l.noTips = ct, nil
	if len(ct.Tips) > 0 {
		bare := make([]Turn, len(turns))
		for i, t := range turns {
			bare[i] = Turn{Action: t.Action, Observation: t.Observation}
		}
		nt, err := r.rend.TokensWithResponses(Messages(pc, l.ep.TaskDesc, l.ep.FirstObs, bare, ""), resps, true)
		if err != nil {
			return fmt.Errorf("%w: rendering %s/%d without tips: %w", ErrRollout, l.ep.Task, l.ep.Variation, err)
		}
		l.noTips = nt.Tokens
	}
	return nil
}

// stepAll records each response and plays its action (in parallel).
func (r *Roller) stepAll(ctx context.Context, ls []*live, seqs []llama.Sequence) error {
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.step(ctx, l, seqs[i])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Roller) step(ctx context.Context, l *live, seq llama.Sequence) error {
	rec := StepRecord{
		Prompt: l.prompt.Tokens, NoTips: l.noTips, TipSpans: l.prompt.Tips, Tips: l.tips,
		Response: seq.Tokens, OldLogp: seq.LogProbs, Text: seq.Text, Key: l.key, Retrieved: l.count,
	}
	if l.ep.Mode.Memory() {
		rec.Intrinsic = algo.IntrinsicReward(rec.Retrieved, r.opts.MemoryConfig.IntrinsicCoef)
	}
	action, ok := ParseAction(r.cfg.Prompt, seq.Text)
	rec.Parsed = ok
	if !ok {
		// the environment's rule for what is not an action: send the
		// response's first line as it is
		action = strings.TrimSpace(strings.SplitN(seq.Text, "\n", 2)[0])
	}
	if r.cfg.CorrectInvalid == CorrectOn {
		valid, err := l.env.ValidActions(ctx)
		if r.envFailed(ctx, l, err) {
			return nil
		}
		if err != nil && !errors.Is(err, environments.ErrNotSupported) {
			return fmt.Errorf("%w: valid actions: %w", ErrRollout, err)
		}
		if fixed, changed := environments.CorrectAction(action, valid); changed {
			action, rec.Corrected = fixed, true
		}
	}
	rec.Action = action
	res, err := l.env.Step(ctx, action)
	if r.envFailed(ctx, l, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: step %s/%d: %w", ErrRollout, l.ep.Task, l.ep.Variation, err)
	}
	rec.Observation, rec.Reward = res.Observation, res.Reward
	resp := seq.Tokens
	if seq.Finish == llama.FinishEOG && len(resp) > 0 {
		resp = resp[:len(resp)-1]
	}
	l.responses = append(l.responses, resp)
	l.prev = append(append(make([]int32, 0, len(rec.Prompt)+len(seq.Tokens)), rec.Prompt...), seq.Tokens...)
	turn := Turn{Action: seq.Text, Observation: res.Observation}
	if r.opts.MemoryConfig.TipsIn == TipsEveryTurn {
		turn.Tips = l.tips // this user message keeps the tips shown for this action
	}
	l.turns = append(l.turns, turn)
	l.ep.Steps = append(l.ep.Steps, rec)
	truncated, _ := res.Info[environments.InfoTruncated].(bool)
	switch {
	case res.Done && !truncated:
		l.ep.Done, l.ep.End = true, EndDone
	case res.Done || len(l.ep.Steps) >= l.limit:
		l.ep.End = EndStepLimit
	}
	return nil
}

// envFailed ends l with EndError when err says that its environment's
// simulator died (not when ctx ended: that stops the whole run); any other
// error stays the caller's.
func (r *Roller) envFailed(ctx context.Context, l *live, err error) bool {
	if err == nil || ctx.Err() != nil || !errors.Is(err, environments.ErrSimulatorDied) {
		return false
	}
	l.ep.End, l.ep.Err, l.broken = EndError, err.Error(), true
	what := "closed"
	if l.pooled {
		what = "replaced by a new one (ScienceWorld: a new JVM) for the next episode"
	}
	log.Warn().Str("task", l.ep.Task).Int("variation", l.ep.Variation).Err(err).
		Msg("the environment died mid-episode: the episode ends with end reason error, and its instance is " + what)
	return true
}

// finish fills an ended episode's score and rewards.
func (r *Roller) finish(l *live) {
	ep := l.ep
	ep.Score = l.env.Score()
	if ep.End == EndError && len(ep.Steps) == 0 { // failed at its reset: no score of its own
		ep.Score = 0
	}
	ep.Success = Succeeded(ep.Score, r.cfg.SuccessScore)
	if ep.Mode.Memory() && len(ep.Steps) > 0 {
		for _, s := range ep.Steps {
			ep.Intrinsic += s.Intrinsic
		}
		ep.Intrinsic /= float64(len(ep.Steps))
	}
}
