package trainer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/trainer/presets"
)

// ErrRunConfig wraps every problem with a run configuration: an unknown key
// (the message names it and its line), a bad value, an unknown preset.
var ErrRunConfig = errors.New("trainer: bad run configuration")

// Config is the run configuration of `empo2 train`. Every field is
// documented, with its default, in configDocs below — the one place that
// also generates `empo2 train --print-config` and the table in
// docs/train.md (TestConfigDocsMatch keeps them in step).
type Config struct {
	Preset     string           `yaml:"preset"`
	Model      string           `yaml:"model"`
	Env        string           `yaml:"env"`
	Tasks      []string         `yaml:"tasks,flow"`
	EnvOptions EnvOptions       `yaml:"env_options"`
	Seed       int64            `yaml:"seed"`
	Steps      int              `yaml:"steps"`
	Threads    int              `yaml:"threads"`
	Device     string           `yaml:"device"`
	Context    int              `yaml:"context"`
	LoRA       LoRASection      `yaml:"lora"`
	Batch      BatchConfig      `yaml:"batch"`
	Mode       ModeConfig       `yaml:"mode"`
	Rollout    RolloutSection   `yaml:"rollout"`
	Memory     MemorySection    `yaml:"memory"`
	Advantage  AdvantageConfig  `yaml:"advantage"`
	Update     UpdateSection    `yaml:"update"`
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
	Eval       EvalSection      `yaml:"eval"`
}

// EnvOptions are passed to the environment (environments.Options).
type EnvOptions struct {
	DataDir         string            `yaml:"data_dir"`
	Jar             string            `yaml:"jar"`
	Simplifications string            `yaml:"simplifications"`
	StepLimit       int               `yaml:"step_limit"`
	Extra           map[string]string `yaml:"extra"`
}

// LoRASection selects the trained adapter.
type LoRASection struct {
	Rank    int      `yaml:"rank"`
	Alpha   float32  `yaml:"alpha"`
	Targets []string `yaml:"targets,flow"`
	Init    string   `yaml:"init"`
}

// BatchConfig: B tasks × G rollouts per step.
type BatchConfig struct {
	Tasks    int `yaml:"tasks"`
	Rollouts int `yaml:"rollouts"`
}

// ModeConfig decides, per step (or per rollout), the EMPO² mode.
type ModeConfig struct {
	MemoryProb    float64 `yaml:"memory_prob"`
	OffPolicyProb float64 `yaml:"offpolicy_prob"`
	Per           string  `yaml:"per"`
	Update        bool    `yaml:"update"`
}

// RolloutSection configures the rollouts (mapped onto RolloutConfig).
type RolloutSection struct {
	Temperature     float64 `yaml:"temperature"`
	StepLimit       int     `yaml:"step_limit"`
	MaxActionTokens int     `yaml:"max_action_tokens"`
	History         string  `yaml:"history"`
	HistoryK        int     `yaml:"history_k"`
	ActionFormat    string  `yaml:"action_format"`
	System          string  `yaml:"system"`
	CorrectInvalid  bool    `yaml:"correct_invalid"`
	TipMaxTokens    int     `yaml:"tip_max_tokens"`
	TipTemperature  float64 `yaml:"tip_temperature"`
}

// MemorySection configures retrieval and tip writing.
type MemorySection struct {
	Embedder      string  `yaml:"embedder"`
	Threshold     float64 `yaml:"threshold"`
	TopK          int     `yaml:"top_k"`
	IntrinsicCoef float64 `yaml:"intrinsic_coef"`
	Cap           int     `yaml:"cap"`
	WriteTips     bool    `yaml:"write_tips"`
}

// AdvantageConfig: GRPO advantages.
type AdvantageConfig struct {
	StdNorm     bool    `yaml:"std_norm"`
	RewardScale float64 `yaml:"reward_scale"`
	Eps         float64 `yaml:"eps"`
}

// UpdateSection: the PPO update.
type UpdateSection struct {
	LR               float64 `yaml:"lr"`
	MinLR            float64 `yaml:"min_lr"`
	Schedule         string  `yaml:"schedule"`
	Warmup           int     `yaml:"warmup"`
	WeightDecay      float64 `yaml:"weight_decay"`
	Beta1            float64 `yaml:"beta1"`
	Beta2            float64 `yaml:"beta2"`
	AdamEps          float64 `yaml:"adam_eps"`
	MaxGradNorm      float64 `yaml:"max_grad_norm"`
	ClipLow          float32 `yaml:"clip_low"`
	ClipHigh         float32 `yaml:"clip_high"`
	DualClip         float32 `yaml:"dual_clip"`
	LowProbThreshold float32 `yaml:"low_prob_threshold"`
	LowProbMask      string  `yaml:"low_prob_mask"`
	Aggregation      string  `yaml:"aggregation"`
	PPOEpochs        int     `yaml:"ppo_epochs"`
	MiniBatch        int     `yaml:"mini_batch"`
	MicroBatch       int     `yaml:"micro_batch"`
	Pack             bool    `yaml:"pack"`
	OldLogp          string  `yaml:"old_logp"`
}

// CheckpointConfig: how often and how many.
type CheckpointConfig struct {
	Every int `yaml:"every"`
	Keep  int `yaml:"keep"`
}

// EvalSection: periodic evaluation on the dev split (issue 12.4).
type EvalSection struct {
	Every         int     `yaml:"every"`
	Episodes      int     `yaml:"episodes"`
	MaxVariations int     `yaml:"max_variations"`
	Split         string  `yaml:"split"`
	Temperature   float64 `yaml:"temperature"`
	Memory        string  `yaml:"memory"`
}

// Mode values (metrics.jsonl "mode").
const (
	ModeOffPolicy    = "off-policy"     // rollouts with tips, update without them
	ModeOnPolicyTips = "on-policy-tips" // rollouts and update with tips
	ModeOnPolicy     = "on-policy"      // no memory
)

// DefaultConfig is the configuration before any preset: small sizes for the
// tiny generated models (the reference's full scale is batch.tasks 8,
// batch.rollouts 8, see docs/train.md), EMPO² mode probabilities.
func DefaultConfig() Config {
	return Config{
		Preset:  presets.Default,
		Env:     "textlab",
		Steps:   10,
		Device:  "cpu",
		Context: 2048,
		LoRA:    LoRASection{Rank: 8, Alpha: 16, Targets: []string{"q", "k", "v", "o", "gate", "up", "down"}},
		Batch:   BatchConfig{Tasks: 2, Rollouts: 4},
		Mode:    ModeConfig{MemoryProb: 0.25, OffPolicyProb: 0.68, Per: "step", Update: true},
		Rollout: RolloutSection{Temperature: 1.0, MaxActionTokens: 32, History: "full", HistoryK: 4,
			ActionFormat: "naive", CorrectInvalid: false, TipMaxTokens: 64, TipTemperature: -1},
		Memory:    MemorySection{Embedder: "hash", Threshold: 0.5, TopK: 10, IntrinsicCoef: 1, Cap: 1000, WriteTips: true},
		Advantage: AdvantageConfig{StdNorm: true, RewardScale: 0.01, Eps: 1e-6},
		Update: UpdateSection{LR: 1e-4, MinLR: 0, Schedule: "constant", Warmup: 0, WeightDecay: 0,
			Beta1: 0.9, Beta2: 0.999, AdamEps: 1e-8, MaxGradNorm: 1.0, ClipLow: 0.2, ClipHigh: 0.3, DualClip: 10,
			LowProbThreshold: -5, LowProbMask: "off-policy", Aggregation: "token-mean", PPOEpochs: 1,
			MiniBatch: 0, MicroBatch: 8, Pack: true, OldLogp: "recompute"},
		Checkpoint: CheckpointConfig{Every: 1, Keep: 3},
		Eval:       EvalSection{Every: 0, Episodes: 1, MaxVariations: 2, Split: "dev", Temperature: 0.4, Memory: "both"},
	}
}

// configDocs documents every key of Config (dotted YAML path → text). The
// default of each key is DefaultConfig's value, shown beside it by
// PrintConfig and ConfigReference.
var configDocs = map[string]string{
	"preset":                      "preset applied under this file: empo2 | grpo | memory-only (see trainer/presets)",
	"model":                       "base model GGUF (a Qwen2-family model; `empo2 model gen` makes tiny ones)",
	"env":                         "environment: textlab | webshop | scienceworld",
	"tasks":                       "tasks to train on (their train-split variations; task/N = variation N only); empty = every task that is not held out",
	"env_options":                 "options passed to the environment",
	"env_options.data_dir":        "data directory (webshop)",
	"env_options.jar":             "simulator jar (scienceworld; one JVM per parallel episode, pooled)",
	"env_options.simplifications": "scienceworld simplification preset, e.g. easy (the EMPO² recipe)",
	"env_options.step_limit":      "environment step limit; 0 = each task's own limit",
	"env_options.extra":           "environment-specific settings (map of strings)",
	"seed":                        "run seed: every random draw (mode, tasks, sampling) derives from (seed, step)",
	"steps":                       "training steps (each: rollouts, tips, update)",
	"threads":                     "CPU threads for llama.cpp and the training graph; 0 = all cores",
	"device":                      "cpu | gpu | auto (training graph and rollouts)",
	"context":                     "rollout context per episode in tokens (KV cache of one sequence)",
	"lora":                        "the trained LoRA adapter",
	"lora.rank":                   "LoRA rank r",
	"lora.alpha":                  "LoRA alpha (scale alpha/r)",
	"lora.targets":                "adapted matrices: q k v o gate up down",
	"lora.init":                   "adapter GGUF to start from (e.g. an SFT warm start); empty = fresh (B = 0)",
	"batch":                       "rollouts per step: batch.tasks × batch.rollouts episodes (reference full scale: 8 × 8)",
	"batch.tasks":                 "B: task variations sampled per step from the train split",
	"batch.rollouts":              "G: episodes per task variation (the GRPO group)",
	"mode":                        "EMPO² modes: u ~ U(0,1); u < p·q off-policy, u < p on-policy with tips, else on-policy",
	"mode.memory_prob":            "p = P(memory rollouts); reference code 0.25, paper text 0.5; grpo 0; memory-only 1",
	"mode.offpolicy_prob":         "q = P(off-policy | memory); reference code 0.68, paper text 1/3",
	"mode.per":                    "draw the mode once per step (the reference) or per rollout: step | rollout",
	"mode.update":                 "update the weights (false: memory-only, the non-parametric baseline)",
	"rollout":                     "rollouts (the prompt format is shared with eval and SFT)",
	"rollout.temperature":         "sampling temperature of training rollouts",
	"rollout.step_limit":          "episode step limit; 0 = the environment's per-task limit",
	"rollout.max_action_tokens":   "max tokens of one action (response)",
	"rollout.history":             "history in the prompt: full | last-k",
	"rollout.history_k":           "turns kept with history last-k",
	"rollout.action_format":       "naive (one action line) | cot (reasoning, then <action>…</action>)",
	"rollout.system":              "system text; empty = the built-in one",
	"rollout.correct_invalid":     "map an invalid action to the most similar valid one (Jaccard, as the reference for ScienceWorld)",
	"rollout.tip_max_tokens":      "max tokens of a written tip",
	"rollout.tip_temperature":     "sampling temperature of tip writing; < 0 = rollout.temperature (the reference), 0 = greedy",
	"memory":                      "tips memory (memory.db in the run directory)",
	"memory.embedder":             "hash (built-in) | policy (the policy's mean-pooled states) | path of a BERT-type embedding GGUF",
	"memory.threshold":            "cosine similarity a tip must exceed to be retrieved (calibrate per embedder; 0.5 was for MiniLM)",
	"memory.top_k":                "tips put in the prompt (highest stored score first)",
	"memory.intrinsic_coef":       "coefficient of the intrinsic reward 1/(count+1) in memory rollouts; 0 = off",
	"memory.cap":                  "entries kept per task variation, oldest dropped first",
	"memory.write_tips":           "write one tip per training episode (entries stamped with the step)",
	"advantage":                   "GRPO advantages within each task's group",
	"advantage.std_norm":          "divide by the group's std: A = (R − mean)/(std + eps); false: A = R − mean",
	"advantage.reward_scale":      "episode reward R = reward_scale · final score (+ intrinsic); 0.01 maps 0..100 to 0..1",
	"advantage.eps":               "added to the std",
	"update":                      "PPO update through trainer.Updater (AdamW on the LoRA parameters)",
	"update.lr":                   "learning rate (the reference's 1e-6 was a full fine-tune; LoRA wants more)",
	"update.min_lr":               "final learning rate of the cosine schedule",
	"update.schedule":             "constant | cosine (over steps × ppo_epochs × mini-batches per step)",
	"update.warmup":               "warmup updates",
	"update.weight_decay":         "AdamW weight decay",
	"update.beta1":                "AdamW β1",
	"update.beta2":                "AdamW β2",
	"update.adam_eps":             "AdamW ε",
	"update.max_grad_norm":        "global gradient-norm clip; 0 = off",
	"update.clip_low":             "PPO ε_low (ratio ≥ 1 − ε_low)",
	"update.clip_high":            "PPO ε_high (ratio ≤ 1 + ε_high)",
	"update.dual_clip":            "dual-clip constant c (bound −c·A for A < 0); 0 = off",
	"update.low_prob_threshold":   "δ of low-probability masking: a response with min old log-prob < δ is dropped",
	"update.low_prob_mask":        "where masking applies: off-policy (the reference: when tips were used) | tips (off-policy and on-policy-tips) | always | never",
	"update.aggregation":          "token-mean | seq-mean-token-mean (packing needs token-mean)",
	"update.ppo_epochs":           "passes over the step's samples",
	"update.mini_batch":           "sequences per optimizer step; 0 = all of the step's in one",
	"update.micro_batch":          "sequences per forward/backward call (gradient accumulation); 0 = the whole mini-batch",
	"update.pack":                 "train an episode as one sequence where later prompts extend earlier ones",
	"update.old_logp":             "π_old: recompute (training graph, behaviour prompt; the reference) | rollout (llama.cpp's sampled log-probs)",
	"checkpoint":                  "checkpoints/step-NNNNNN: adapter, optimizer, step (written atomically)",
	"checkpoint.every":            "checkpoint every N steps (and at the end and on SIGINT/SIGTERM)",
	"checkpoint.keep":             "checkpoints kept (oldest removed)",
	"eval":                        "periodic evaluation, appended to eval.jsonl",
	"eval.every":                  "evaluate every N steps; 0 = never",
	"eval.episodes":               "episodes per task variation",
	"eval.split":                  "split evaluated: dev | test | train",
	"eval.max_variations":         "the first N variations of the split per task; 0 = all",
	"eval.temperature":            "sampling temperature of evaluation",
	"eval.memory":                 "off | on | both",
}

// fromPreset returns the default configuration with preset name applied.
func fromPreset(name string) (Config, error) {
	c := DefaultConfig()
	b, err := presets.Get(name)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrRunConfig, err)
	}
	if err := decodeStrict(bytes.NewReader(b), &c, "preset "+name); err != nil {
		return c, err
	}
	c.Preset = name
	return c, nil
}

func decodeStrict(r io.Reader, c *Config, what string) error {
	d := yaml.NewDecoder(r)
	d.KnownFields(true)
	if err := d.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s: %w", ErrRunConfig, what, err)
	}
	return nil
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
		if err := decodeStrict(bytes.NewReader(raw), &c, file); err != nil {
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
func (c *Config) Set(kv string) error {
	key, val, ok := strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("%w: --set %q: want key.path=value", ErrRunConfig, kv)
	}
	if _, known := configDocs[key]; !known {
		return fmt.Errorf("%w: --set: unknown key %q (known: %s)", ErrRunConfig, key, strings.Join(ConfigKeys(), ", "))
	}
	var root yaml.Node
	if err := root.Encode(c); err != nil {
		return fmt.Errorf("%w: %w", ErrRunConfig, err)
	}
	var vn yaml.Node
	if err := yaml.Unmarshal([]byte(val), &vn); err != nil {
		return fmt.Errorf("%w: --set %s: value %q: %w", ErrRunConfig, key, val, err)
	}
	var nv *yaml.Node
	if len(vn.Content) == 1 {
		nv = vn.Content[0]
	} else {
		nv = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: ""}
	}
	m := &root
	parts := strings.Split(key, ".")
	for i, p := range parts {
		found := false
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == p {
				if i == len(parts)-1 {
					m.Content[j+1] = nv
				} else {
					m = m.Content[j+1]
				}
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%w: --set: unknown key %q", ErrRunConfig, key)
		}
	}
	var out Config
	b, err := yaml.Marshal(&root)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRunConfig, err)
	}
	if err := decodeStrict(bytes.NewReader(b), &out, "--set "+key); err != nil {
		return err
	}
	*c = out
	return nil
}

// ConfigKeys lists every documented key, sorted.
func ConfigKeys() []string {
	ks := make([]string, 0, len(configDocs))
	for k := range configDocs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// configNode encodes c as a YAML mapping with every key commented from
// configDocs (default shown when it differs from c's value).
func configNode(c Config) (*yaml.Node, error) {
	var root yaml.Node
	if err := root.Encode(c); err != nil {
		return nil, err
	}
	var def yaml.Node
	if err := def.Encode(DefaultConfig()); err != nil {
		return nil, err
	}
	var walk func(n, d *yaml.Node, prefix string)
	walk = func(n, d *yaml.Node, prefix string) {
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			path := prefix + k.Value
			var dv *yaml.Node
			if d != nil {
				for i := 0; i+1 < len(d.Content); i += 2 {
					if d.Content[i].Value == k.Value {
						dv = d.Content[i+1]
					}
				}
			}
			doc := configDocs[path]
			if v.Kind == yaml.MappingNode && hasChildDocs(path) {
				k.HeadComment = doc
				walk(v, dv, path+".")
				continue
			}
			if dv != nil && nodeText(dv) != nodeText(v) {
				doc += " (default " + nodeText(dv) + ")"
			}
			k.HeadComment = doc
		}
	}
	walk(&root, &def, "")
	return &root, nil
}

func hasChildDocs(path string) bool {
	for k := range configDocs {
		if strings.HasPrefix(k, path+".") {
			return true
		}
	}
	return false
}

func nodeText(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.Value == "" {
			return `""`
		}
		return n.Value
	}
	b, _ := yaml.Marshal(n)
	s := strings.TrimSpace(string(b))
	if n.Kind == yaml.MappingNode && s == "{}" || s == "" {
		return "{}"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// PrintConfig writes c as commented YAML (every key with its documentation
// and, where c differs, the default): `empo2 train --print-config` and the
// run directory's config.yaml.
func PrintConfig(w io.Writer, c Config) error {
	n, err := configNode(c)
	if err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return err
	}
	return enc.Close()
}

// ConfigReference is the Markdown table of every key, its default and its
// documentation (docs/train.md embeds it).
func ConfigReference() string {
	var def yaml.Node
	_ = def.Encode(DefaultConfig())
	vals := map[string]string{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for j := 0; j+1 < len(n.Content); j += 2 {
			path := prefix + n.Content[j].Value
			v := n.Content[j+1]
			if v.Kind == yaml.MappingNode && hasChildDocs(path) {
				walk(v, path+".")
				continue
			}
			vals[path] = nodeText(v)
		}
	}
	walk(&def, "")
	var b strings.Builder
	b.WriteString("| key | default | meaning |\n| --- | --- | --- |\n")
	for _, k := range ConfigKeys() {
		v, leaf := vals[k]
		if !leaf {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", k, strings.ReplaceAll(v, "|", `\|`), strings.ReplaceAll(configDocs[k], "|", `\|`))
	}
	return b.String()
}

// leafKeys lists the YAML leaf paths of Config by reflection (for tests).
func leafKeys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			if f.Type.Kind() == reflect.Struct {
				out = append(out, prefix+name)
				walk(f.Type, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}

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
	case c.Mode.Per != "step" && c.Mode.Per != "rollout":
		return bad("mode.per %q (want step or rollout)", c.Mode.Per)
	case c.LoRA.Rank < 1:
		return bad("lora.rank %d < 1", c.LoRA.Rank)
	case c.Context < 64:
		return bad("context %d < 64", c.Context)
	case c.Rollout.Temperature < 0 || math.IsNaN(c.Rollout.Temperature):
		return bad("rollout.temperature %v < 0", c.Rollout.Temperature)
	case c.Rollout.TipTemperature > 100 || math.IsNaN(c.Rollout.TipTemperature):
		return bad("rollout.tip_temperature %v > 100", c.Rollout.TipTemperature)
	case c.Rollout.MaxActionTokens < 1:
		return bad("rollout.max_action_tokens %d < 1", c.Rollout.MaxActionTokens)
	case c.Rollout.History != "full" && c.Rollout.History != "last-k":
		return bad("rollout.history %q (want full or last-k)", c.Rollout.History)
	case c.Rollout.ActionFormat != "naive" && c.Rollout.ActionFormat != "cot":
		return bad("rollout.action_format %q (want naive or cot)", c.Rollout.ActionFormat)
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
	case !oneOf(c.Update.LowProbMask, "off-policy", "tips", "always", "never"):
		return bad("update.low_prob_mask %q (want off-policy, tips, always or never)", c.Update.LowProbMask)
	case !oneOf(c.Update.Aggregation, "token-mean", "seq-mean-token-mean"):
		return bad("update.aggregation %q", c.Update.Aggregation)
	case !oneOf(c.Update.OldLogp, "recompute", "rollout"):
		return bad("update.old_logp %q (want recompute or rollout)", c.Update.OldLogp)
	case c.Checkpoint.Every < 0 || c.Checkpoint.Keep < 1:
		return bad("checkpoint.every must be ≥ 0 and checkpoint.keep ≥ 1")
	case c.Eval.Every < 0 || c.Eval.Episodes < 1 || c.Eval.MaxVariations < 0:
		return bad("eval.every and eval.max_variations must be ≥ 0 and eval.episodes ≥ 1")
	case !oneOf(c.Eval.Memory, "off", "on", "both"):
		return bad("eval.memory %q (want off, on or both)", c.Eval.Memory)
	case !oneOf(c.Eval.Split, "train", "dev", "test"):
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

func oneOf(s string, vals ...string) bool {
	for _, v := range vals {
		if s == v {
			return true
		}
	}
	return false
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
func (c *Config) Schedule() (Schedule, error) {
	s := Schedule{Kind: c.Update.Schedule, BaseLR: c.Update.LR, MinLR: c.Update.MinLR, Warmup: c.Update.Warmup,
		Total: max(c.Steps*c.updatesPerStep(), c.Update.Warmup+1)}
	if !c.Mode.Update && s.BaseLR == 0 {
		s.BaseLR = 1 // never used: no updates
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%w: update: %w", ErrRunConfig, err)
	}
	return s, nil
}

// UpdateConfig is the trainer.Updater configuration of the update section.
func (c *Config) UpdateConfig() (UpdateConfig, error) {
	obj, err := c.Objective()
	if err != nil {
		return UpdateConfig{}, err
	}
	s, err := c.Schedule()
	if err != nil {
		return UpdateConfig{}, err
	}
	a := AdamWConfig{Beta1: c.Update.Beta1, Beta2: c.Update.Beta2, Eps: c.Update.AdamEps, WeightDecay: c.Update.WeightDecay}
	if err := a.Validate(); err != nil {
		return UpdateConfig{}, fmt.Errorf("%w: update: %w", ErrRunConfig, err)
	}
	return UpdateConfig{AdamW: a, Schedule: s, MaxGradNorm: c.Update.MaxGradNorm, Objective: obj, MicroBatch: c.Update.MicroBatch}, nil
}
