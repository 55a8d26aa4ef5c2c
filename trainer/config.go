package trainer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/config"
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
	Preset     string               `yaml:"preset" doc:"preset applied under this file: empo2 | grpo | memory-only (see trainer/presets)"`
	Model      string               "yaml:\"model\" doc:\"base model GGUF (a Qwen2-family model; `empo2 model gen` makes tiny ones)\""
	Env        string               `yaml:"env" doc:"environment: textlab | webshop | scienceworld"`
	Tasks      []string             `yaml:"tasks,flow" doc:"tasks to train on (their train-split variations; task/N = variation N only); empty = every task that is not held out"`
	EnvOptions environments.Options `yaml:"env_options" doc:"options passed to the environment"`
	Seed       int64                `yaml:"seed" doc:"run seed: every random draw (mode, tasks, sampling) derives from (seed, step)"`
	Steps      int                  `yaml:"steps" doc:"training steps (each: rollouts, tips, update)"`
	Threads    int                  `yaml:"threads" doc:"CPU threads for llama.cpp and the training graph; 0 = all cores"`
	Device     string               `yaml:"device" doc:"cpu | gpu | auto (training graph and rollouts)"`
	Context    int                  `yaml:"context" doc:"rollout context per episode in tokens (KV cache of one sequence)"`
	LoRA       LoRAConfig           `yaml:"lora" doc:"the trained LoRA adapter"`
	Batch      BatchConfig          `yaml:"batch" doc:"rollouts per step: batch.tasks × batch.rollouts episodes (reference full scale: 8 × 8)"`
	Mode       ModeConfig           `yaml:"mode" doc:"EMPO² modes: u ~ U(0,1); u < p·q off-policy, u < p on-policy with tips, else on-policy"`
	Rollout    rollout.Config       `yaml:"rollout" doc:"rollouts (the prompt format is shared with eval and SFT)"`
	Memory     rollout.MemoryConfig `yaml:"memory" doc:"tips memory (memory.db in the run directory)"`
	Advantage  AdvantageConfig      `yaml:"advantage" doc:"GRPO advantages within each task's group"`
	Update     UpdateConfig         `yaml:"update" doc:"PPO update through optim.Updater (AdamW on the LoRA parameters)"`
	Checkpoint CheckpointConfig     `yaml:"checkpoint" doc:"checkpoints/step-NNNNNN: adapter, optimizer, step (written atomically)"`
	Eval       evaluate.Config      `yaml:"eval" doc:"periodic evaluation, appended to eval.jsonl"`
}

// LoRAConfig selects the trained adapter.
type LoRAConfig struct {
	Rank    int      `yaml:"rank" doc:"LoRA rank r"`
	Alpha   float32  `yaml:"alpha" doc:"LoRA alpha (scale alpha/r)"`
	Targets []string `yaml:"targets,flow" doc:"adapted matrices: q k v o gate up down"`
	Init    string   `yaml:"init" doc:"adapter GGUF to start from (e.g. an SFT warm start); empty = fresh (B = 0)"`
}

// BatchConfig: B tasks × G rollouts per step.
type BatchConfig struct {
	Tasks    int `yaml:"tasks" doc:"B: task variations sampled per step from the train split"`
	Rollouts int `yaml:"rollouts" doc:"G: episodes per task variation (the GRPO group)"`
}

// ModeConfig decides, per step (or per rollout), the EMPO² mode.
type ModeConfig struct {
	MemoryProb    float64 `yaml:"memory_prob" doc:"p = P(memory rollouts); reference code 0.25, paper text 0.5; grpo 0; memory-only 1"`
	OffPolicyProb float64 `yaml:"offpolicy_prob" doc:"q = P(off-policy | memory); reference code 0.68, paper text 1/3"`
	Per           Per     `yaml:"per" doc:"draw the mode once per step (the reference) or per rollout: step | rollout"`
	Update        bool    `yaml:"update" doc:"update the weights (false: memory-only, the non-parametric baseline)"`
}

// AdvantageConfig: GRPO advantages.
type AdvantageConfig struct {
	StdNorm     bool    `yaml:"std_norm" doc:"divide by the group's std: A = (R − mean)/(std + eps); false: A = R − mean"`
	RewardScale float64 `yaml:"reward_scale" doc:"episode reward R = reward_scale · final score (+ intrinsic); 0.01 maps 0..100 to 0..1"`
	Eps         float64 `yaml:"eps" doc:"added to the std"`
}

// UpdateConfig: the PPO update (the optimizer's settings, UpdaterConfig,
// and how samples are built and batched).
type UpdateConfig struct {
	LR               float64            `yaml:"lr" doc:"learning rate (the reference's 1e-6 was a full fine-tune; LoRA wants more)"`
	MinLR            float64            `yaml:"min_lr" doc:"final learning rate of the cosine schedule"`
	Schedule         optim.ScheduleKind `yaml:"schedule" doc:"constant | cosine (over steps × ppo_epochs × mini-batches per step)"`
	Warmup           int                `yaml:"warmup" doc:"warmup updates"`
	WeightDecay      float64            `yaml:"weight_decay" doc:"AdamW weight decay"`
	Beta1            float64            `yaml:"beta1" doc:"AdamW β1"`
	Beta2            float64            `yaml:"beta2" doc:"AdamW β2"`
	AdamEps          float64            `yaml:"adam_eps" doc:"AdamW ε"`
	MaxGradNorm      float64            `yaml:"max_grad_norm" doc:"global gradient-norm clip; 0 = off"`
	ClipLow          float32            `yaml:"clip_low" doc:"PPO ε_low (ratio ≥ 1 − ε_low)"`
	ClipHigh         float32            `yaml:"clip_high" doc:"PPO ε_high (ratio ≤ 1 + ε_high)"`
	DualClip         float32            `yaml:"dual_clip" doc:"dual-clip constant c (bound −c·A for A < 0); 0 = off"`
	LowProbThreshold float32            `yaml:"low_prob_threshold" doc:"δ of low-probability masking: a response with min old log-prob < δ is dropped"`
	LowProbMask      LowProbMask        `yaml:"low_prob_mask" doc:"where masking applies: off-policy (the reference: when tips were used) | tips (off-policy and on-policy-tips) | always | never"`
	Aggregation      cgo.Aggregation    `yaml:"aggregation" doc:"token-mean | seq-mean-token-mean (packing needs token-mean)"`
	PPOEpochs        int                `yaml:"ppo_epochs" doc:"passes over the step's samples"`
	MiniBatch        int                `yaml:"mini_batch" doc:"sequences per optimizer step; 0 = all of the step's in one"`
	MicroBatch       int                `yaml:"micro_batch" doc:"sequences per forward/backward call (gradient accumulation); 0 = the whole mini-batch"`
	Pack             bool               `yaml:"pack" doc:"train an episode as one sequence where later prompts extend earlier ones"`
	OldLogp          OldLogp            `yaml:"old_logp" doc:"π_old: recompute (training graph, behaviour prompt; the reference) | rollout (llama.cpp's sampled log-probs)"`
	Transpose        Transpose          `yaml:"transpose" doc:"Wᵀ for the backward through the frozen matrices: auto (stored copies when they take at most half the memory left after the base model and the rollouts, else made in each graph) | stored | in-graph (no second copy of the weights)"`
	MaxComputeMiB    int64              `yaml:"max_compute_mib" doc:"cap on one training or scoring graph's compute buffer in MiB (larger batches are split); 0 = auto (the engine's default, at most the memory available at start less the base model, stored Wᵀ and the rollouts); -1 = no cap"`
}

// CheckpointConfig: how often and how many.
type CheckpointConfig struct {
	Every int `yaml:"every" doc:"checkpoint every N steps (and at the end and on SIGINT/SIGTERM)"`
	Keep  int `yaml:"keep" doc:"checkpoints kept (oldest removed)"`
}

// Mode is the EMPO² mode of an episode (metrics.jsonl "mode").
type Mode string

// EMPO² modes.
const (
	ModeOffPolicy    Mode = "off-policy"     // rollouts with tips, update without them
	ModeOnPolicyTips Mode = "on-policy-tips" // rollouts and update with tips
	ModeOnPolicy     Mode = "on-policy"      // no memory
	// ModeMixed is not an episode's mode: metrics.jsonl's "mode" of a step
	// whose episodes drew their own (mode.per: rollout).
	ModeMixed Mode = "mixed"
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
// (update.low_prob_mask), by the episode's mode.
type LowProbMask string

// Masking scopes.
const (
	MaskOffPolicy LowProbMask = "off-policy" // off-policy episodes (the reference: when tips were used)
	MaskTips      LowProbMask = "tips"       // off-policy and on-policy-tips episodes
	MaskAlways    LowProbMask = "always"
	MaskNever     LowProbMask = "never"
)

// Valid reports whether m is a known scope.
func (m LowProbMask) Valid() bool {
	return m == MaskOffPolicy || m == MaskTips || m == MaskAlways || m == MaskNever
}

// Applies reports whether masking applies to an episode in mode.
func (m LowProbMask) Applies(mode Mode) bool {
	switch m {
	case MaskAlways:
		return true
	case MaskTips:
		return mode == ModeOffPolicy || mode == ModeOnPolicyTips
	case MaskOffPolicy:
		return mode == ModeOffPolicy
	}
	return false
}

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

// DefaultConfig is the configuration before any preset: small sizes for the
// tiny generated models (the reference's full scale is batch.tasks 8,
// batch.rollouts 8, see docs/train.md), EMPO² mode probabilities; the
// rollout, memory and eval sections are their packages' defaults, AdamW's
// and the objective's hyper-parameters optim.DefaultAdamW's and
// cgo.DefaultObjective's.
func DefaultConfig() Config {
	adam, obj := optim.DefaultAdamW(), cgo.DefaultObjective()
	return Config{
		Preset:    presets.Default,
		Env:       "textlab",
		Steps:     10,
		Device:    "cpu",
		Context:   2048,
		LoRA:      LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"q", "k", "v", "o", "gate", "up", "down"}},
		Batch:     BatchConfig{Tasks: 2, Rollouts: 4},
		Mode:      ModeConfig{MemoryProb: 0.25, OffPolicyProb: 0.68, Per: PerStep, Update: true},
		Rollout:   rollout.DefaultConfig(),
		Memory:    rollout.DefaultMemoryConfig(),
		Advantage: AdvantageConfig{StdNorm: true, RewardScale: 0.01, Eps: 1e-6},
		Update: UpdateConfig{LR: 1e-4, MinLR: 0, Schedule: optim.ScheduleConstant, Warmup: 0, WeightDecay: adam.WeightDecay,
			Beta1: adam.Beta1, Beta2: adam.Beta2, AdamEps: adam.Eps, MaxGradNorm: 1.0, ClipLow: obj.ClipLow, ClipHigh: obj.ClipHigh,
			DualClip: obj.DualClip, LowProbThreshold: obj.LowProbThreshold, LowProbMask: MaskOffPolicy, Aggregation: obj.Aggregation,
			PPOEpochs: 1, MiniBatch: 0, MicroBatch: 8, Pack: true, OldLogp: OldLogpRecompute,
			Transpose: TransposeAuto},
		Checkpoint: CheckpointConfig{Every: 1, Keep: 3},
		Eval:       evaluate.DefaultConfig(),
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
	var raw []byte
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return Config{}, fmt.Errorf("%w: %w", ErrRunConfig, err)
		}
		raw = b
		if preset == "" {
			var p struct {
				Preset string `yaml:"preset"`
			}
			if err := yaml.Unmarshal(raw, &p); err != nil {
				return Config{}, fmt.Errorf("%w: %s: %w", ErrRunConfig, file, err)
			}
			preset = p.Preset
		}
	}
	if preset == "" {
		preset = presets.Default
	}
	c, err := fromPreset(preset)
	if err != nil {
		return c, err
	}
	if raw != nil {
		if err := schema.Decode(bytes.NewReader(raw), &c, file); err != nil {
			return c, err
		}
		c.Preset = preset
	}
	for _, s := range sets {
		if err := c.Set(s); err != nil {
			return c, err
		}
	}
	return c, nil
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

// Validate checks ranges and enumerations.
func (c *Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrRunConfig}, a...)...) }
	prob := func(v float64) bool { return !math.IsNaN(v) && v >= 0 && v <= 1 }
	switch {
	case c.Steps < 0:
		return bad("steps %d < 0", c.Steps)
	case c.Env == "":
		return bad("env is empty")
	case c.Batch.Tasks < 1 || c.Batch.Rollouts < 1:
		return bad("batch.tasks and batch.rollouts must be ≥ 1 (got %d, %d)", c.Batch.Tasks, c.Batch.Rollouts)
	case !prob(c.Mode.MemoryProb) || !prob(c.Mode.OffPolicyProb):
		return bad("mode.memory_prob %v and mode.offpolicy_prob %v must be in [0, 1]", c.Mode.MemoryProb, c.Mode.OffPolicyProb)
	case !c.Mode.Per.Valid():
		return bad("mode.per %q (want step or rollout)", c.Mode.Per)
	case c.LoRA.Rank < 1:
		return bad("lora.rank %d < 1", c.LoRA.Rank)
	case c.Context < 64:
		return bad("context %d < 64", c.Context)
	case c.Rollout.Temperature < 0 || math.IsNaN(c.Rollout.Temperature):
		return bad("rollout.temperature %v < 0", c.Rollout.Temperature)
	case c.Rollout.TipTemperature > 100 || math.IsNaN(c.Rollout.TipTemperature):
		return bad("rollout.tip_temperature %v > 100", c.Rollout.TipTemperature)
	case c.Rollout.Prompt.MaxActionTokens < 1:
		return bad("rollout.max_action_tokens %d < 1", c.Rollout.Prompt.MaxActionTokens)
	case !c.Rollout.Prompt.History.Valid():
		return bad("rollout.history %q (want full or last-k)", c.Rollout.Prompt.History)
	case !c.Rollout.Prompt.ActionFormat.Valid():
		return bad("rollout.action_format %q (want naive or cot)", c.Rollout.Prompt.ActionFormat)
	case c.Memory.TopK < 0 || c.Memory.Cap < 0:
		return bad("memory.top_k and memory.cap must be ≥ 0")
	case c.Advantage.RewardScale <= 0 || c.Advantage.Eps < 0:
		return bad("advantage.reward_scale must be > 0 and advantage.eps ≥ 0")
	case c.Update.LR < 0 || math.IsNaN(c.Update.LR):
		return bad("update.lr %v", c.Update.LR)
	case c.Update.PPOEpochs < 1:
		return bad("update.ppo_epochs %d < 1", c.Update.PPOEpochs)
	case c.Update.MiniBatch < 0 || c.Update.MicroBatch < 0:
		return bad("update.mini_batch and update.micro_batch must be ≥ 0")
	case !c.Update.LowProbMask.Valid():
		return bad("update.low_prob_mask %q (want off-policy, tips, always or never)", c.Update.LowProbMask)
	case !c.Update.Aggregation.Valid():
		return bad("update.aggregation %q", c.Update.Aggregation)
	case !c.Update.OldLogp.Valid():
		return bad("update.old_logp %q (want recompute or rollout)", c.Update.OldLogp)
	case !c.Update.Transpose.Valid():
		return bad("update.transpose %q (want auto, stored or in-graph)", c.Update.Transpose)
	case c.Update.MaxComputeMiB < -1:
		return bad("update.max_compute_mib %d (want -1, 0 or a size in MiB)", c.Update.MaxComputeMiB)
	case c.Checkpoint.Every < 0 || c.Checkpoint.Keep < 1:
		return bad("checkpoint.every must be ≥ 0 and checkpoint.keep ≥ 1")
	case c.Eval.Every < 0 || c.Eval.Episodes < 1 || c.Eval.MaxVariations < 0:
		return bad("eval.every and eval.max_variations must be ≥ 0 and eval.episodes ≥ 1")
	case !c.Eval.Memory.Valid():
		return bad("eval.memory %q (want off, on or both)", c.Eval.Memory)
	case !c.Eval.Split.Valid():
		return bad("eval.split %q", c.Eval.Split)
	}
	if _, err := c.Objective(); err != nil {
		return err
	}
	if _, err := c.Schedule(); err != nil {
		return err
	}
	return nil
}

// Objective is the PPO/dual-clip objective of the update section.
func (c *Config) Objective() (cgo.Objective, error) {
	o := cgo.Objective{ClipLow: c.Update.ClipLow, ClipHigh: c.Update.ClipHigh, DualClip: c.Update.DualClip,
		LowProbThreshold: c.Update.LowProbThreshold, Aggregation: c.Update.Aggregation}
	if o.ClipLow < 0 || o.ClipLow >= 1 || o.ClipHigh < 0 || (o.DualClip != 0 && o.DualClip <= 1) {
		return o, fmt.Errorf("%w: update.clip_low %v (need [0,1)), update.clip_high %v (need ≥ 0), update.dual_clip %v (need 0 or > 1)",
			ErrRunConfig, o.ClipLow, o.ClipHigh, o.DualClip)
	}
	return o, nil
}

// updatesPerStep estimates the optimizer steps of one training step (for
// the cosine schedule's length): ppo_epochs × mini-batches of B·G episodes.
func (c *Config) updatesPerStep() int {
	n := 1
	if mb := c.Update.MiniBatch; mb > 0 {
		n = (c.Batch.Tasks*c.Batch.Rollouts + mb - 1) / mb
	}
	return n * c.Update.PPOEpochs
}

// Schedule is the learning-rate schedule of the update section.
func (c *Config) Schedule() (optim.Schedule, error) {
	s := optim.Schedule{Kind: c.Update.Schedule, BaseLR: c.Update.LR, MinLR: c.Update.MinLR, Warmup: c.Update.Warmup,
		Total: max(c.Steps*c.updatesPerStep(), c.Update.Warmup+1)}
	if !c.Mode.Update && s.BaseLR == 0 {
		s.BaseLR = 1 // never used: no updates
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%w: update: %w", ErrRunConfig, err)
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
