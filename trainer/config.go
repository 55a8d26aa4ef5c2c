package trainer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/config"
	"github.com/empo2/empo2/internal/tfevents"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/presets"
	"github.com/empo2/empo2/trainer/rollout"
)

// ErrRunConfig wraps every problem with a run configuration: an unknown key
// (the message names it and its line), a bad value, an unknown preset.
var ErrRunConfig = errors.New("trainer: bad run configuration")

// Config is the run configuration of `empo2 train`. Each section is the
// type of the package that reads it, documented (`doc` tags) and defaulted
// there; package internal/config turns the tags into `empo2 train
// --print-config`, the run directory's config.yaml and the table in
// docs/train.md (TestConfigDocsMatch keeps them in step).
type Config struct {
	Preset     string               `yaml:"preset" doc:"preset applied under this file: empo2 | grpo | memory-only | scienceworld (see trainer/presets)"`
	Model      string               "yaml:\"model\" doc:\"base model GGUF (a Qwen2-family model; `empo2 model gen` makes tiny ones)\""
	Env        string               `yaml:"env" doc:"environment: textlab | webshop | scienceworld"`
	Tasks      []string             `yaml:"tasks,flow" doc:"tasks to train on (their train-split variations; task/N = variation N only); empty = every task that is not held out"`
	EnvOptions environments.Options `yaml:"env_options" doc:"options passed to the environment"`
	Seed       int64                `yaml:"seed" doc:"run seed: every random draw (mode, tasks, sampling) derives from (seed, step)"`
	Steps      int                  `yaml:"steps" doc:"training steps (each: rollouts, tips, update)" range:"[0,1e9]"`
	Threads    int                  `yaml:"threads" doc:"CPU threads for llama.cpp and the training graph; 0 = all cores" range:"[0,1024]"`
	Device     string               `yaml:"device" doc:"cpu | gpu | auto (training graph and rollouts)"`
	Context    int                  `yaml:"context" doc:"rollout context per episode in tokens (KV cache of one sequence), at most the model's training context; 0 = the model's training context, at most 8192 (the reference's prompt limit)" range:"[0,1048576]"`
	LoRA       LoRAConfig           `yaml:"lora" doc:"the trained LoRA adapter"`
	Batch      BatchConfig          `yaml:"batch" doc:"rollouts per step: batch.tasks × batch.rollouts episodes (reference full scale: 16 × 8, the authors' ScienceWorld config)"`
	Mode       ModeConfig           `yaml:"mode" doc:"EMPO² modes: u ~ U(0,1); u < p·q off-policy, u < p on-policy with tips, else on-policy"`
	Rollout    rollout.Config       `yaml:"rollout" doc:"rollouts (the prompt format is shared with eval and SFT)"`
	Memory     rollout.MemoryConfig `yaml:"memory" doc:"tips memory (memory.db in the run directory)"`
	Advantage  AdvantageConfig      `yaml:"advantage" doc:"GRPO advantages within each task's group"`
	Update     UpdateConfig         `yaml:"update" doc:"PPO update through optim.Updater (AdamW on the LoRA parameters)"`
	Checkpoint CheckpointConfig     `yaml:"checkpoint" doc:"checkpoints/step-NNNNNN: adapter, optimizer, step (written atomically)"`
	Eval       evaluate.Config      `yaml:"eval" doc:"periodic evaluation, appended to eval.jsonl"`
	Logging    tfevents.Config      `yaml:"logging" doc:"what the run writes for watching it besides metrics.jsonl"`
}

// LoRAConfig selects the trained adapter.
type LoRAConfig struct {
	Rank    int      `yaml:"rank" doc:"LoRA rank r" range:"[1,4096]"`
	Alpha   float32  `yaml:"alpha" doc:"LoRA alpha (scale alpha/r)" range:"(0,1e6]"`
	Targets []string `yaml:"targets,flow" doc:"adapted matrices: q k v o gate up down"`
	Init    string   `yaml:"init" doc:"adapter GGUF to start from (e.g. an SFT warm start); empty = fresh (B = 0)"`
}

// BatchConfig: B tasks × G rollouts per step.
type BatchConfig struct {
	Tasks    int `yaml:"tasks" doc:"B: task variations sampled per step from the train split" range:"[1,]"`
	Rollouts int `yaml:"rollouts" doc:"G: episodes per task variation (the GRPO group)" range:"[1,]"`
}

// ModeConfig decides, per step (or per rollout), the EMPO² mode.
type ModeConfig struct {
	MemoryProb    float64 `yaml:"memory_prob" doc:"p = P(memory rollouts); reference code 0.25, paper text 0.5; grpo 0; memory-only 1" range:"[0,1]"`
	OffPolicyProb float64 `yaml:"offpolicy_prob" doc:"q = P(off-policy | memory); reference code 0.68, paper text 1/3" range:"[0,1]"`
	Per           Per     `yaml:"per" doc:"draw the mode once per step (the reference) or per rollout: step | rollout"`
	Update        bool    `yaml:"update" doc:"update the weights (false: memory-only, the non-parametric baseline)"`
}

// AdvantageConfig: GRPO advantages.
type AdvantageConfig struct {
	StdNorm     bool    `yaml:"std_norm" doc:"divide by the group's std: A = (R − mean)/(std + eps); false: A = R − mean"`
	RewardScale float64 `yaml:"reward_scale" doc:"episode reward R = reward_scale · final score (+ intrinsic); 0.01 maps 0..100 to 0..1" range:"(0,1e6]"`
	Eps         float64 `yaml:"eps" doc:"added to the std" range:"[0,1]"`
	ZeroVar     ZeroVar `yaml:"zero_var" doc:"groups whose scores are all equal (no signal): skip (not built, no update: saves their compute) | train (trained with advantage 0, as verl's GRPO does: the update runs, its policy gradient is zero)"`
}

// ZeroVar is advantage.zero_var: what becomes of a group whose extrinsic
// scores are all equal.
type ZeroVar string

// Zero-variance group handling.
const (
	ZeroVarSkip  ZeroVar = "skip"
	ZeroVarTrain ZeroVar = "train"
)

// Valid reports whether z is skip or train.
func (z ZeroVar) Valid() bool { return z == ZeroVarSkip || z == ZeroVarTrain }

// UpdateConfig: the PPO update (the optimizer's settings, UpdaterConfig,
// and how samples are built and batched).
type UpdateConfig struct {
	LR               float64            `yaml:"lr" doc:"learning rate (the reference's 1e-6 was a full fine-tune; LoRA wants more)" range:"[0,1]"`
	MinLR            float64            `yaml:"min_lr" doc:"final learning rate of the cosine schedule" range:"[0,1]"`
	Schedule         optim.ScheduleKind `yaml:"schedule" doc:"constant | cosine (over the run's training steps; within a step over the optimizer steps it really takes, so the last update of the last step is at min_lr)"`
	Warmup           int                `yaml:"warmup" doc:"warmup: the first N optimizer steps ramp the rate up linearly" range:"[0,1e9]"`
	WeightDecay      float64            `yaml:"weight_decay" doc:"AdamW weight decay" range:"[0,1]"`
	Beta1            float64            `yaml:"beta1" doc:"AdamW β1" range:"[0,1)"`
	Beta2            float64            `yaml:"beta2" doc:"AdamW β2" range:"[0,1)"`
	AdamEps          float64            `yaml:"adam_eps" doc:"AdamW ε" range:"(0,1]"`
	MaxGradNorm      float64            `yaml:"max_grad_norm" doc:"global gradient-norm clip; 0 = off" range:"[0,]"`
	ClipLow          float32            `yaml:"clip_low" doc:"PPO ε_low (ratio ≥ 1 − ε_low)" range:"[0,1)"`
	ClipHigh         float32            `yaml:"clip_high" doc:"PPO ε_high (ratio ≤ 1 + ε_high)" range:"[0,10]"`
	DualClip         float32            `yaml:"dual_clip" doc:"dual-clip constant c (bound −c·A for A < 0); 0 = off" range:"[0,100]"`
	LowProbThreshold float32            `yaml:"low_prob_threshold" doc:"δ of low-probability masking: a response with min old log-prob < δ is dropped" range:"[,0]"`
	LowProbMask      LowProbMask        `yaml:"low_prob_mask" doc:"episodes whose responses low-probability masking may drop: off-policy (the paper's text: updates without the tips the rollout saw) | memory-steps (episodes that retrieved tips: off-policy and on-policy-tips) | every-step (an earlier version of the reference code: every episode of an EMPO² run) | never (the reference code's last 7B config)"`
	Aggregation      cgo.Aggregation    `yaml:"aggregation" doc:"token-mean | seq-mean-token-mean (packing needs token-mean)"`
	PPOEpochs        int                `yaml:"ppo_epochs" doc:"passes over the step's samples" range:"[1,1000]"`
	MiniBatch        int                `yaml:"mini_batch" doc:"sequences per optimizer step, when mini_batches is 0 (set it to 0 to cut by size); 0 = all of the step's in one" range:"[0,1e6]"`
	MiniBatches      int                `yaml:"mini_batches" doc:"optimizer steps per PPO epoch: the step's samples split into this many near-equal mini-batches (fewer when there are fewer samples), so that every step makes the same number of updates whatever its mode; 8 = the authors' several updates per step (mini-batches of 16 over their 16 tasks × 8 rollouts); 0 = by mini_batch" range:"[0,1e6]"`
	MicroBatch       int                `yaml:"micro_batch" doc:"sequences per forward/backward call (gradient accumulation); 0 = the whole mini-batch" range:"[0,1e6]"`
	Pack             bool               `yaml:"pack" doc:"train an episode as one sequence where later prompts extend earlier ones"`
	OldLogp          OldLogp            `yaml:"old_logp" doc:"π_old: recompute (training graph, behaviour prompt; the reference) | rollout (llama.cpp's sampled log-probs)"`
	Transpose        Transpose          `yaml:"transpose" doc:"Wᵀ for the backward through the frozen matrices: auto (stored copies when they take at most half the memory left after the base model and the rollouts, else made in each graph) | stored | in-graph (no second copy of the weights)"`
	MaxComputeMiB    int64              `yaml:"max_compute_mib" doc:"cap on one training or scoring graph's compute buffer in MiB (larger batches are split); 0 = auto (the engine's default, at most the memory available at start less the base model, stored Wᵀ and the rollouts); -1 = no cap"`
}

// CheckpointConfig: how often and how many.
type CheckpointConfig struct {
	Every int `yaml:"every" doc:"checkpoint every N steps (and at the end and on SIGINT/SIGTERM)" range:"[0,1e9]"`
	Keep  int `yaml:"keep" doc:"checkpoints kept (oldest removed)" range:"[1,1e6]"`
}

// Mode is the EMPO² mode of an episode (metrics.jsonl "mode"): algo.Mode.
type Mode = algo.Mode

// EMPO² modes (algo's).
const (
	ModeOffPolicy    = algo.ModeOffPolicy    // rollouts with tips, update without them
	ModeOnPolicyTips = algo.ModeOnPolicyTips // rollouts and update with tips
	ModeOnPolicy     = algo.ModeOnPolicy     // no memory
	ModeMixed        = algo.ModeMixed        // metrics.jsonl's "mode" of a step with per-rollout modes
)

// Per is how often the EMPO² mode is drawn (mode.per).
type Per string

// Mode draws.
const (
	PerStep    Per = "step"    // once per step (the reference)
	PerRollout Per = "rollout" // once per episode
)

// Valid reports whether p is known.
func (p Per) Valid() bool { return p == PerStep || p == PerRollout }

// LowProbMask is where low-probability masking applies
// (update.low_prob_mask), by the episode's mode: algo.LowProbMask.
type LowProbMask = algo.LowProbMask

// Masking scopes (algo's).
const (
	MaskOffPolicy   = algo.MaskOffPolicy   // off-policy episodes (the paper's text)
	MaskMemorySteps = algo.MaskMemorySteps // episodes that retrieved tips: off-policy and on-policy-tips
	MaskEveryStep   = algo.MaskEveryStep   // every episode (an earlier version of the reference code)
	MaskNever       = algo.MaskNever       // no masking (the reference code's last 7B config)
)

// OldLogp is where π_old comes from (update.old_logp).
type OldLogp string

// Sources of π_old.
const (
	OldLogpRecompute OldLogp = "recompute" // the training graph on the behaviour prompt (the reference)
	OldLogpRollout   OldLogp = "rollout"   // llama.cpp's sampled log-probs
)

// Valid reports whether o is known.
func (o OldLogp) Valid() bool { return o == OldLogpRecompute || o == OldLogpRollout }

// Transpose is where the backward's Wᵀ of the frozen matrices comes from
// (update.transpose; cgo.Options.TransposeInGraph).
type Transpose string

// Sources of Wᵀ.
const (
	TransposeAuto    Transpose = "auto"     // stored if it fits the memory (planEngine), else in-graph
	TransposeStored  Transpose = "stored"   // copies made at load (as large as the matrices; F16 for quantized)
	TransposeInGraph Transpose = "in-graph" // made in each training graph, freed after use
)

// Valid reports whether t is known.
func (t Transpose) Valid() bool {
	return t == TransposeAuto || t == TransposeStored || t == TransposeInGraph
}

// DefaultMiniBatches is update.mini_batches' default: several optimizer
// updates per training step, as the authors take them — verl cuts their
// step's batch (16 tasks × 8 rollouts) into mini-batches of 16, each one
// update, so 8 at their scale; at the tiny default scale (2 × 4) a step
// makes up to 8 updates, one per sample when it has fewer.
const DefaultMiniBatches = 8

// DefaultConfig is the configuration before any preset: small sizes for the
// tiny generated models (the reference's full scale is batch.tasks 16,
// batch.rollouts 8, see docs/train.md), EMPO² mode probabilities; the
// rollout, memory and eval sections are their packages' defaults, AdamW's
// and the objective's hyper-parameters optim.DefaultAdamW's, algo.DefaultPPO's
// and algo.DefaultLowProbThreshold.
func DefaultConfig() Config {
	adam, ppo := optim.DefaultAdamW(), algo.DefaultPPO()
	return Config{
		Preset:    presets.Default,
		Env:       "textlab",
		Steps:     10,
		Device:    "cpu",
		Context:   0,
		LoRA:      LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"q", "k", "v", "o", "gate", "up", "down"}},
		Batch:     BatchConfig{Tasks: 2, Rollouts: 4},
		Mode:      ModeConfig{MemoryProb: 0.25, OffPolicyProb: 0.68, Per: PerStep, Update: true},
		Rollout:   rollout.DefaultConfig(),
		Memory:    rollout.DefaultMemoryConfig(),
		Advantage: AdvantageConfig{StdNorm: true, RewardScale: 0.01, Eps: 1e-6, ZeroVar: ZeroVarSkip},
		Update: UpdateConfig{LR: 1e-4, MinLR: 0, Schedule: optim.ScheduleConstant, Warmup: 0, WeightDecay: adam.WeightDecay,
			Beta1: adam.Beta1, Beta2: adam.Beta2, AdamEps: adam.Eps, MaxGradNorm: 1.0, ClipLow: ppo.ClipLow, ClipHigh: ppo.ClipHigh,
			DualClip: ppo.DualClip, LowProbThreshold: algo.DefaultLowProbThreshold, LowProbMask: MaskOffPolicy, Aggregation: cgo.AggTokenMean,
			PPOEpochs: 1, MiniBatch: 0, MiniBatches: DefaultMiniBatches, MicroBatch: 8, Pack: true, OldLogp: OldLogpRecompute,
			Transpose: TransposeAuto},
		Checkpoint: CheckpointConfig{Every: 1, Keep: 3},
		Eval:       evaluate.DefaultConfig(),
		Logging:    tfevents.DefaultConfig(),
	}
}

// schema documents Config (from its doc tags) and resolves, overrides and
// prints it.
var schema = config.New(DefaultConfig, ErrRunConfig)

// fromPreset returns the default configuration with preset name applied.
func fromPreset(name string) (Config, error) {
	c := DefaultConfig()
	b, err := presets.Get(name)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrRunConfig, err)
	}
	if err := schema.Decode(bytes.NewReader(b), &c, "preset "+name); err != nil {
		return c, err
	}
	c.Preset = name
	return c, nil
}

// LoadConfig resolves a run configuration: defaults, then the preset (the
// preset argument, else the file's `preset:` key, else empo2), then the
// file (strict: an unknown key is an error naming it and its line), then
// the --set overrides (key.path=value, the value parsed as YAML). file ""
// means none.
func LoadConfig(file, preset string, sets []string) (Config, error) {
	raw, err := schema.ReadFile(file)
	if err != nil {
		return Config{}, err
	}
	if raw != nil && preset == "" {
		var p struct {
			Preset string `yaml:"preset"`
		}
		if err := yaml.Unmarshal(raw, &p); err != nil {
			return Config{}, fmt.Errorf("%w: %s: %w", ErrRunConfig, file, err)
		}
		preset = p.Preset
	}
	if preset == "" {
		preset = presets.Default
	}
	c, err := fromPreset(preset)
	if err != nil {
		return c, err
	}
	if raw != nil {
		if err := schema.Apply(&c, raw, file, nil); err != nil {
			return c, err
		}
		c.Preset = preset
	}
	return c, schema.Apply(&c, nil, "", sets)
}

// Set applies one override "key.path=value"; value is YAML ("0.5", "[a, b]",
// "true", "text"). An unknown key is an error listing the known ones.
func (c *Config) Set(kv string) error { return schema.Set(c, kv) }

// ConfigKeys lists every documented key, sorted.
func ConfigKeys() []string { return schema.Keys() }

// ConfigDoc is the documentation of a key ("" when it has none).
func ConfigDoc(key string) string { return schema.Doc(key) }

// PrintConfig writes c as commented YAML (every key with its documentation
// and, where c differs, the default): `empo2 train --print-config` and the
// run directory's config.yaml.
func PrintConfig(w io.Writer, c Config) error { return schema.Print(w, c) }

// ConfigReference is the Markdown table of every key, its default and its
// documentation (docs/train.md embeds it).
func ConfigReference() string { return schema.Reference() }

// Validate checks the configuration before anything runs: every float
// finite and every key in its range (the `range` tags, internal/config's
// Check), the enumerations, and what spans keys (the batch's size, the
// LoRA targets, the objective and the schedule). Every error names the key
// and the value.
func (c *Config) Validate() error {
	if err := schema.Check(c); err != nil {
		return err
	}
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrRunConfig}, a...)...) }
	switch {
	case c.Env == "":
		return bad("env is empty")
	case c.Update.MiniBatch > 0 && c.Update.MiniBatches > 0:
		return bad("update.mini_batch %d and update.mini_batches %d: set one (size or count of the mini-batches; mini_batches defaults to %d: set update.mini_batches=0 to cut by size)", c.Update.MiniBatch, c.Update.MiniBatches, DefaultMiniBatches)
	case !c.Advantage.ZeroVar.Valid():
		return bad("advantage.zero_var %q (want skip or train)", c.Advantage.ZeroVar)
	case !c.Mode.Per.Valid():
		return bad("mode.per %q (want step or rollout)", c.Mode.Per)
	case c.Context != 0 && c.Context < 64:
		return bad("context %d < 64 (0: the model's training context)", c.Context)
	case !c.Rollout.Prompt.History.Valid():
		return bad("rollout.history %q (want full or last-k)", c.Rollout.Prompt.History)
	case !c.Rollout.Prompt.ActionFormat.Valid():
		return bad("rollout.action_format %q (want naive or cot)", c.Rollout.Prompt.ActionFormat)
	case !c.Update.Aggregation.Valid():
		return bad("update.aggregation %q", c.Update.Aggregation)
	case !c.Update.OldLogp.Valid():
		return bad("update.old_logp %q (want recompute or rollout)", c.Update.OldLogp)
	case !c.Update.Transpose.Valid():
		return bad("update.transpose %q (want auto, stored or in-graph)", c.Update.Transpose)
	case c.Update.MaxComputeMiB < -1:
		return bad("update.max_compute_mib %d (want -1, 0 or a size in MiB)", c.Update.MaxComputeMiB)
	case c.Eval.Every < 0 || c.Eval.Episodes < 1 || c.Eval.MaxVariations < 0:
		return bad("eval.every %d and eval.max_variations %d must be ≥ 0 and eval.episodes %d ≥ 1", c.Eval.Every, c.Eval.MaxVariations, c.Eval.Episodes)
	case !c.Eval.Memory.Valid():
		return bad("eval.memory %q (want off, on or both)", c.Eval.Memory)
	case !c.Eval.Split.Valid():
		return bad("eval.split %q", c.Eval.Split)
	case math.IsNaN(c.Eval.Temperature) || c.Eval.Temperature < 0 || c.Eval.Temperature > 100:
		return bad("eval.temperature %v: want 0 (greedy) to 100", c.Eval.Temperature)
	case c.EnvOptions.StepLimit < 0:
		return bad("env_options.step_limit %d: want ≥ 0 (0 = the task's own limit)", c.EnvOptions.StepLimit)
	}
	// One KV sequence per episode of a step, decoded together.
	// Each factor bounded first: a product of two huge factors can wrap to 0.
	if m := llama.MaxSequences(); c.Batch.Tasks > m || c.Batch.Rollouts > m {
		return bad("batch.tasks %d, batch.rollouts %d: llama.cpp decodes at most %d sequences together, so each (and their product, the episodes per step) must be at most %d",
			c.Batch.Tasks, c.Batch.Rollouts, m, m)
	}
	if n := int64(c.Batch.Tasks) * int64(c.Batch.Rollouts); n > int64(llama.MaxSequences()) {
		return bad("batch.tasks × batch.rollouts = %d × %d = %d episodes per step: llama.cpp decodes at most %d sequences together",
			c.Batch.Tasks, c.Batch.Rollouts, n, llama.MaxSequences())
	} else if n*int64(c.Context) > llama.MaxContextCells {
		return bad("batch.tasks × batch.rollouts × context = %d × %d tokens exceeds the %d KV cells of one context", n, c.Context, llama.MaxContextCells)
	}
	if len(c.LoRA.Targets) == 0 {
		return bad("lora.targets is [] (empty): list the adapted matrices, e.g. [q, k, v, o, gate, up, down]")
	}
	for i, tg := range c.LoRA.Targets {
		if lora.TargetIndex(tg) < 0 {
			return bad("lora.targets: unknown target %q (want some of %s)", tg, strings.Join(lora.DefaultTargets, " "))
		}
		if slices.Contains(c.LoRA.Targets[:i], tg) {
			return bad("lora.targets %v: %q is listed twice (list each adapted matrix once)", c.LoRA.Targets, tg)
		}
	}
	if err := c.Memory.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrRunConfig, err)
	}
	if err := c.Update.LowProbMask.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrRunConfig, err)
	}
	if _, err := c.Objective(); err != nil {
		return err
	}
	if _, err := c.Schedule(); err != nil {
		return err
	}
	return nil
}

// MaxAutoContext caps the automatic per-episode context (context: 0);
// rollout.MaxAutoContext.
const MaxAutoContext = rollout.MaxAutoContext

// EpisodeContext is the per-episode context a run uses with a model whose
// training context is nCtxTrain (0 = unknown): rollout.EpisodeContext, the
// automatic one when context is 0, and never more than the training
// context, which the training sequences (a packed episode is its last
// prompt and response) must fit.
func (c *Config) EpisodeContext(nCtxTrain int) int {
	n := rollout.EpisodeContext(c.Context, nCtxTrain)
	if nCtxTrain > 0 {
		n = min(n, nCtxTrain)
	}
	return n
}

// PPO is the clipped / dual-clip surrogate of the update section.
func (c *Config) PPO() algo.PPO {
	return algo.PPO{ClipLow: c.Update.ClipLow, ClipHigh: c.Update.ClipHigh, DualClip: c.Update.DualClip}
}

// Objective is the training graph's objective of the update section: the
// surrogate (PPO, validated here by algo.PPO.Validate, the one check of
// its ranges) and the aggregation. Low-probability masking is not part of
// it: BuildSamples applies it.
func (c *Config) Objective() (cgo.Objective, error) {
	p := c.PPO()
	o := cgo.Objective{Policy: p, Aggregation: c.Update.Aggregation}
	if err := p.Validate(); err != nil {
		return o, fmt.Errorf("%w: update.clip_low %v (need [0,1)), update.clip_high %v (need ≥ 0), update.dual_clip %v (need 0 or > 1): %w",
			ErrRunConfig, p.ClipLow, p.ClipHigh, p.DualClip, err)
	}
	return o, nil
}

// Schedule is the learning-rate schedule of the update section. The loop
// takes each update's rate at its progress in the run (RunUpdates,
// Progress; optim.Schedule.LRAt): the number of optimizer steps a training
// step takes depends on its samples, so it is counted as the updates
// happen, never estimated. Total (the update count LR would need) is the
// warmup plus the steps, for validation and the state files only.
func (c *Config) Schedule() (optim.Schedule, error) {
	s := optim.Schedule{Kind: c.Update.Schedule, BaseLR: c.Update.LR, MinLR: c.Update.MinLR, Warmup: c.Update.Warmup,
		Total: c.Update.Warmup + max(c.Steps, 1)}
	if !c.Mode.Update && s.BaseLR == 0 {
		s.BaseLR = 1 // never used: no updates
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%w: update.schedule %s, update.lr %v, update.min_lr %v, update.warmup %d over %d updates: %w",
			ErrRunConfig, s.Kind, c.Update.LR, s.MinLR, s.Warmup, s.Total, err)
	}
	return s, nil
}

// UpdaterConfig is the optim.Updater configuration of the update section.
func (c *Config) UpdaterConfig() (optim.Config, error) {
	obj, err := c.Objective()
	if err != nil {
		return optim.Config{}, err
	}
	s, err := c.Schedule()
	if err != nil {
		return optim.Config{}, err
	}
	a := optim.AdamWConfig{Beta1: c.Update.Beta1, Beta2: c.Update.Beta2, Eps: c.Update.AdamEps, WeightDecay: c.Update.WeightDecay}
	if err := a.Validate(); err != nil {
		return optim.Config{}, fmt.Errorf("%w: update: %w", ErrRunConfig, err)
	}
	return optim.Config{AdamW: a, Schedule: s, MaxGradNorm: c.Update.MaxGradNorm, Objective: obj, MicroBatch: c.Update.MicroBatch}, nil
}
