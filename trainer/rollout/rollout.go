package rollout

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog/log"
	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/runfiles"
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

// Config is the `rollout` section of a run configuration: how episodes
// are sampled and played, and the prompt (PromptConfig, inline: the one
// prompt format of rollouts, eval and SFT).
type Config struct {
	Temperature    float64      `yaml:"temperature" doc:"sampling temperature of training rollouts" range:"[0,100]"`
	StepLimit      int          `yaml:"step_limit" doc:"episode step limit; 0 = the environment's per-task limit" range:"[0,1e6]"`
	Prompt         PromptConfig `yaml:",inline"`
	CorrectInvalid Correction   `yaml:"correct_invalid" doc:"map an invalid action to the most similar valid one (Jaccard): auto (the environment's default: on for scienceworld, as the EMPO² recipe; off for textlab and webshop) | on | off"`
	TipMaxTokens   int          `yaml:"tip_max_tokens" doc:"max tokens of a written tip (generation also stops at the end of its first line; the reference: 512)" range:"[0,65536]"`
	TipTemperature float64      `yaml:"tip_temperature" doc:"sampling temperature of tip writing; < 0 = rollout.temperature (the reference), 0 = greedy" range:"[,100]"`
	SuccessScore   float64      `yaml:"success_score" doc:"an episode succeeds when its final score reaches this; 0 = the environment's (100, the full score, on textlab and webshop; 71 on scienceworld, the EMPO² recipe's score > 70 on its integer scores)"`
	OracleTips     bool         `yaml:"oracle_tips" doc:"the oracle-memory control (docs/experiment.md, Study 3): every written tip is the episode's true tip written by code (trainer/demos.TrajectoryTip, which textlab's tip checker verifies) instead of the policy's; the entries' action and score as always"`
}

// DefaultConfig is temperature 1, the default prompt, the environment's
// own action correction and success score, tips of at most 512 tokens (the
// reference code's last version) sampled at the rollout temperature.
func DefaultConfig() Config {
	return Config{Temperature: 1, Prompt: DefaultPromptConfig(), CorrectInvalid: CorrectAuto, TipMaxTokens: 512, TipTemperature: -1}
}

// Correction is rollout.correct_invalid: whether an action outside the
// environment's valid set is replaced by the most similar valid one
// (environments.CorrectAction) before it is played.
type Correction string

// Corrections.
const (
	CorrectAuto Correction = "auto" // the environment's default (environments.Defaults.CorrectActions)
	CorrectOn   Correction = "on"
	CorrectOff  Correction = "off"
)

// Valid reports whether c is auto, on or off ("" counts as auto).
func (c Correction) Valid() bool {
	return c == "" || c == CorrectAuto || c == CorrectOn || c == CorrectOff
}

// Enabled resolves c for an environment with defaults d.
func (c Correction) Enabled(d environments.Defaults) bool {
	if c == CorrectOn {
		return true
	}
	return c != CorrectOff && d.CorrectActions
}

// UnmarshalYAML reads auto, on or off, and also true and false (the key
// was a boolean before it had an automatic setting).
func (c *Correction) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if n.Decode(&b) == nil && n.Tag == "!!bool" {
		*c = CorrectOff
		if b {
			*c = CorrectOn
		}
		return nil
	}
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v := Correction(strings.ToLower(strings.TrimSpace(s)))
	if v == "" || !v.Valid() {
		return fmt.Errorf("line %d: correct_invalid %q: want auto, on or off", n.Line, s)
	}
	*c = v
	return nil
}

// MaxAutoContext caps the automatic per-episode context (context: 0): the
// EMPO² recipe's prompt limit (max_prompt_length 8192), which bounds the
// KV cache of models trained on long contexts (32k for Qwen2.5-7B).
const MaxAutoContext = 8192

// EpisodeContext is the per-episode context of a `context` setting with a
// model whose training context is nCtxTrain (0 = unknown): context when
// set, else the training context up to MaxAutoContext (2048 when unknown).
func EpisodeContext(context, nCtxTrain int) int {
	switch {
	case context != 0:
		return context
	case nCtxTrain <= 0:
		return 2048
	}
	return min(nCtxTrain, MaxAutoContext)
}

// Succeeded is the one success rule of training, evaluation and the greedy
// check of SFT: an episode succeeds when its final score reaches
// successScore (Config.SuccessScore, 0 = the environment's,
// environments.Defaults.Success). The EMPO² recipe counts success on
// ScienceWorld as "done and score > 70", where its wrapper ends every
// episode done (completed, failed or out of steps), so that rule is this
// one with successScore 71 on ScienceWorld's integer scores; on textlab and
// WebShop success is the full score, 100 (WebShop's reward 1).
func Succeeded(score, successScore float64) bool { return score >= successScore }

// MemoryConfig is the `memory` section of a run configuration: the tips
// memory's retrieval, the intrinsic reward of memory rollouts, and tip
// writing. Every value means what it says (no zero stands for a default);
// Validate checks them.
type MemoryConfig struct {
	Embedder      string  `yaml:"embedder" doc:"hash (built-in) | policy (the policy's mean-pooled states) | path of a BERT-type embedding GGUF"`
	Key           KeyKind `yaml:"key" doc:"retrieval key: conversation (the reference code: the chat so far without the system text; an episode's entries are all stored under its final conversation) | observation (task and latest observation; each step's entry under its own)"`
	KeyPieces     int     `yaml:"key_pieces" doc:"the embedder reads the first N pieces of a key (hash: words and single punctuation marks, memstore.CutPieces; policy or GGUF: the model's tokens); 256 = all-MiniLM-L6-v2's limit"`
	Threshold     float64 `yaml:"threshold" doc:"cosine similarity a tip must exceed to be retrieved, in [-1, 1); 0 retrieves every positive cosine (calibrated for the hash embedder with conversation keys, docs/memory.md; the reference's 0.5 was for MiniLM)"`
	TopK          int     `yaml:"top_k" doc:"tips put in the prompt, ≥ 1 (highest stored score first, ties oldest first, as the reference code's stable sort)"`
	TipsIn        TipsIn  `yaml:"tips_in" doc:"every-turn (the reference code: each turn's user message keeps the tips retrieved for it) | last-turn (only the latest user message has tips)"`
	IntrinsicCoef float64 `yaml:"intrinsic_coef" doc:"per-step novelty bonus coef/(tips+1) of memory rollouts, in score points (1: the reference's scale, at most 1% of the 0–100 range); 0 = the extrinsic score alone (the reference code's last version)"`
	Cap           int     `yaml:"cap" doc:"entries kept per task variation, oldest dropped first"`
	WriteTips     bool    `yaml:"write_tips" doc:"write one tip per training episode (entries stamped with the step)"`
}

// KeyKind is the retrieval key of memory.key.
type KeyKind string

// Retrieval keys.
const (
	// KeyConversation: the conversation so far (ConversationKey), the
	// reference code's key; an episode's entries are stored under its final
	// conversation.
	KeyConversation KeyKind = "conversation"
	// KeyObservation: the task and the latest observation (MemoryKey); each
	// step's entry is stored under that step's key.
	KeyObservation KeyKind = "observation"
)

// Valid reports whether k is a known key.
func (k KeyKind) Valid() bool { return k == KeyConversation || k == KeyObservation }

// TipsIn is where retrieved tips stay in the chat (memory.tips_in).
type TipsIn string

// Tip placements.
const (
	TipsEveryTurn TipsIn = "every-turn" // each turn's user message keeps the tips retrieved for it (the reference code)
	TipsLastTurn  TipsIn = "last-turn"  // only the latest user message carries tips
)

// Valid reports whether t is a known placement.
func (t TipsIn) Valid() bool { return t == TipsEveryTurn || t == TipsLastTurn }

// DefaultKeyPieces is all-MiniLM-L6-v2's input limit (256 word pieces),
// the reference's sentence embedder.
const DefaultKeyPieces = 256

// DefaultThreshold is memory.threshold's default: the retrieval threshold
// calibrated for the hash embedder with conversation keys cut at 256
// pieces (docs/memory.md, TestConversationKeyThreshold): every entry of a
// variation passes it, as the reference's MiniLM passes 0.5, and entries of
// other variations do not.
const DefaultThreshold = 0.5

// DefaultMemoryConfig is the reference code's memory: conversation keys
// cut at 256 pieces, the hash embedder at its calibrated threshold, the
// top 10 tips by score (ties oldest first) in every turn, the novelty
// bonus at the reference's scale, 1000 entries per task variation, tips
// written.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{Embedder: EmbedderHash, Key: KeyConversation, KeyPieces: DefaultKeyPieces, Threshold: DefaultThreshold,
		TopK: memstore.DefaultK, TipsIn: TipsEveryTurn, IntrinsicCoef: 1, Cap: 1000, WriteTips: true}
}

// Validate reports ErrRollout for a value outside its range.
func (mc MemoryConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: memory."+f, append([]any{ErrRollout}, a...)...) }
	switch {
	case mc.Embedder == "":
		return bad("embedder is empty (want %s, %s or a GGUF path)", EmbedderHash, EmbedderPolicy)
	case !mc.Key.Valid():
		return bad("key %q (want %s or %s)", mc.Key, KeyConversation, KeyObservation)
	case mc.KeyPieces < 1:
		return bad("key_pieces %d (want ≥ 1)", mc.KeyPieces)
	case !(mc.Threshold >= -1 && mc.Threshold < 1):
		return bad("threshold %v (want a cosine in [-1, 1))", mc.Threshold)
	case mc.TopK < 1:
		return bad("top_k %d (want ≥ 1 tips per prompt)", mc.TopK)
	case !mc.TipsIn.Valid():
		return bad("tips_in %q (want %s or %s)", mc.TipsIn, TipsEveryTurn, TipsLastTurn)
	case !(mc.IntrinsicCoef >= 0) || math.IsInf(mc.IntrinsicCoef, 0):
		return bad("intrinsic_coef %v (want ≥ 0)", mc.IntrinsicCoef)
	case mc.Cap < 0:
		return bad("cap %d (want ≥ 0; 0 = no cap)", mc.Cap)
	}
	return nil
}

// Query is the memstore query of the configuration: top_k, threshold, by
// stored score with ties oldest first.
func (mc MemoryConfig) Query() memstore.Query {
	return memstore.Query{K: mc.TopK, Threshold: float32(mc.Threshold), Order: memstore.OrderByScoreStable}
}

// Built-in embedders of MemoryConfig.Embedder (anything else is a GGUF path;
// see OpenEmbedder).
const (
	EmbedderHash   = "hash"
	EmbedderPolicy = "policy"
)

// Job is one episode to play.
type Job struct {
	Task      string
	Variation int
	Group     int       // GRPO group (the caller's numbering)
	Seed      int64     // sampling seed of the episode (with Options.Seed); also the env reset seed
	Mode      algo.Mode // EMPO² mode: memory modes (Mode.Memory) retrieve tips before every action
}

// Namespace is the memory namespace of a job: "task/variation".
func (j Job) Namespace() string { return j.Task + "/" + strconv.Itoa(j.Variation) }

// StepRecord is one action of an episode.
type StepRecord struct {
	Prompt []int32 // tokens the policy saw (its tip blocks included)
	// NoTips is the same chat rendered with no tips at all, tokenized on its
	// own (the off-policy training input); nil when Prompt has no tips.
	NoTips      []int32
	TipSpans    [][2]int  // token spans of Prompt's tip blocks (ChatTokens.Tips)
	Tips        string    // the tip block retrieved for this action ("" none)
	Response    []int32   // sampled tokens, incl. a final end-of-generation token unless cut by max_action_tokens
	OldLogp     []float32 // raw log-probs of Response at temperature 1 (π_old)
	Text        string    // the response's text (without the end-of-generation token)
	Action      string    // the action sent to the environment (after parsing / correction)
	Observation string
	Reward      float64 // environment reward of this step (score change)
	Retrieved   int     // tips put in the prompt for this action (≤ memory.top_k)
	Intrinsic   float64 // novelty bonus of this step in score points: memory episodes algo.IntrinsicReward(Retrieved, coef), else 0
	Key         string  // the retrieval key text of this step's context
	Parsed      bool    // the response contained a well-formed action
	Corrected   bool    // the action was mapped to a valid one
}

// PromptWithoutTips is the prompt with no tips: NoTips, or Prompt when it
// had none.
func (s StepRecord) PromptWithoutTips() []int32 {
	if s.NoTips != nil {
		return s.NoTips
	}
	return s.Prompt
}

// Episode is a finished episode.
type Episode struct {
	Job
	Steps     []StepRecord
	Score     float64 // final environment score
	Success   bool    // Succeeded(Score, Config.SuccessScore)
	Done      bool    // the environment ended the episode (not the step limit or the context)
	Intrinsic float64 // memory episodes: mean over steps of StepRecord.Intrinsic (score points); else 0
	Tip       string  // set by WriteTips
	End       End     // why the episode ended
	Err       string  // End == EndError: what failed

	// TaskDesc and FirstObs are what the environment's reset gave: the
	// first user message's text (Messages).
	TaskDesc, FirstObs string

	slot int
}

// End is why an episode ended.
type End string

// Episode ends.
const (
	EndDone      End = "done"       // the environment ended it
	EndStepLimit End = "step-limit" // it reached its step limit
	EndContext   End = "context"    // the next prompt and action would not fit the context
	// EndError: the environment failed (its simulator died); the episode
	// keeps the steps it played, carries no training signal (trainer
	// leaves it out of its GRPO group) and its instance is replaced.
	EndError End = "error"
)

// Ends lists the end reasons in their reporting order.
var Ends = []End{EndDone, EndStepLimit, EndContext, EndError}

// EndCounts counts episodes by end reason (the run files' end_reasons,
// keyed by End's text).
type EndCounts = runfiles.EndCounts

// CountEnds counts eps by end reason; every reason is present (0 when
// none ended so).
func CountEnds(eps []Episode) EndCounts {
	c := EndCounts{}
	for _, e := range Ends {
		c[string(e)] = 0
	}
	for i := range eps {
		c[string(eps[i].End)]++
	}
	return c
}

// ContextWarning is a warning when most episodes (more than half) ended
// because their context was full ("" otherwise): such episodes neither
// finish nor fail, so with a weak policy every episode of a group keeps
// the same score and the group carries no training signal. context is the
// per-episode context in tokens.
func ContextWarning(c EndCounts, context int) string {
	n, all := c[string(EndContext)], c.Total()
	if all == 0 || 2*n <= all {
		return ""
	}
	return fmt.Sprintf("%d of %d episodes ended on a full context (%d tokens) before the environment or the step limit ended them: "+
		"raise context (up to the model's training context) or keep fewer turns (rollout.history: last-k); with rollout.correct_invalid off, "+
		"an invalid action does not advance the episode", n, all, context)
}

// Stats describes a Run (or, for TTips, a WriteTips).
// PromptTokensSeen sums every prompt's length (what the policy read);
// PromptTokensDecoded is what llama.cpp decoded (the rest came from the
// episodes' KV); PromptTokensUnique counts each episode's distinct prompt
// tokens: per turn, the prompt's tokens that the previous prompt and
// response did not already hold at the same positions (after a tip block,
// the rest of the history). Decoded/Unique ≈ 1 is perfect reuse (below 1
// when a slot's next episode shares the system prompt); without reuse it
// is ≈ T/2 for T turns.
type Stats struct {
	Episodes, EnvSteps, GenTokens, PromptTokensSeen, PromptTokensDecoded int
	PromptTokensUnique                                                   int
	TRollout, TEmbedRetrieve, TTips                                      time.Duration
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	s.Episodes += o.Episodes
	s.EnvSteps += o.EnvSteps
	s.GenTokens += o.GenTokens
	s.PromptTokensSeen += o.PromptTokensSeen
	s.PromptTokensDecoded += o.PromptTokensDecoded
	s.PromptTokensUnique += o.PromptTokensUnique
	s.TRollout += o.TRollout
	s.TEmbedRetrieve += o.TEmbedRetrieve
	s.TTips += o.TTips
}

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
	// Seed is the run seed; an episode samples with MixSeed(Seed, Job.Seed).
	// OracleTip writes the oracle tip of a finished episode; required by
	// Config.OracleTips (the caller supplies trainer/demos.TrajectoryTip:
	// rollout does not import the demos).
	OracleTip func(environments.Trajectory) string
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
	}
	case cfg.OracleTips && o.OracleTip == nil:
		return nil, fmt.Errorf("%w: oracle_tips needs the oracle tip writer (Options.OracleTip)", ErrRollout)
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
