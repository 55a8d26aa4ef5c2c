package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/config"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/demos"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// `empo2 eval` as one library call: RunConfig is the command's whole
// configuration (a YAML file, --set, the flags as shortcuts; documented
// by its doc tags, its defaults in DefaultRunConfig), Run opens what it
// names, plays Evaluate or EvaluateOOD and writes the JSON result. The
// settings of a training run (its model, environment, tasks, context,
// rollout and memory sections) become the defaults through
// trainer.LoadEvalConfig, which knows the run's configuration; this
// package only reads the run's checkpoints (package optim) and writes
// into its eval/ folder.

// Checkpoint choices of RunConfig.Checkpoint besides a step number.
const (
	CheckpointLatest = "latest" // the run's checkpoints/latest
	CheckpointBase   = "base"   // no adapter: the run's base model
)

// RunEvalDir is the folder of a run directory that Run writes its results
// into (OOD results one level down, in RunEvalDir/ood).
const RunEvalDir = "eval"

// maxActionTokens bounds rollout.max_action_tokens (rollout.PromptConfig's
// range).
const maxActionTokens = 1 << 16

// maxSeqTokens bounds one KV sequence (llama.NewContext's NCtx).
const maxSeqTokens = 1 << 24

// maxContext is the largest context with parallel sequences.
func maxContext(parallel int) int { return min(maxSeqTokens, llama.MaxContextCells/max(parallel, 1)) }

// maxTrials bounds RunConfig.Trials (and OODConfig.Trials): each trial is a
// full pass over the held-out variations.
const maxTrials = 1000

// RunConfig configures Run: `empo2 eval`'s configuration.
type RunConfig struct {
	Model       string               `yaml:"model" doc:"policy model GGUF; with run: the run's model"`
	LoRA        string               `yaml:"lora" doc:"LoRA adapter GGUF evaluated; empty = none, or with run the checkpoint's"`
	Run         string               `yaml:"run" doc:"training run directory: its model, environment, tasks, context, rollout and memory sections are the defaults, its checkpoint is the adapter, and the result is also written to its eval/ folder"`
	Checkpoint  string               `yaml:"checkpoint" doc:"checkpoint of run evaluated: latest | base (the base model, no adapter) | a step number"`
	Env         string               `yaml:"env" doc:"environment: textlab | webshop | scienceworld"`
	EnvOptions  environments.Options `yaml:"env_options" doc:"options passed to the environment"`
	Tasks       []string             `yaml:"tasks,flow" doc:"tasks evaluated (task/N stands for the task); empty = every task not held out, with ood every held-out task; with run (not ood): the tasks it trained on"`
	Eval        Protocol             `yaml:"eval" doc:"what is played"`
	MemoryDB    string               `yaml:"memory_db" doc:"tips memory of eval.memory on | both (read only unless write_tips); with run: its memory.db"`
	WriteTips   bool                 `yaml:"write_tips" doc:"memory-on episodes write tips into memory_db (otherwise eval never changes it)"`
	OOD         bool                 `yaml:"ood" doc:"out-of-distribution adaptation instead: trials consecutive attempts per held-out variation, a tip written after each into a fresh memory (no weight updates), and the same attempts without memory as the control"`
	Trials      int                  `yaml:"trials" doc:"consecutive attempts per variation with ood (1..1000)"`
	Seed        int64                `yaml:"seed" doc:"seed of the episodes' sampling"`
	Context     int                  `yaml:"context" doc:"tokens per episode (prompt + action); may exceed the model's training context (RoPE); 0 = the model's training context, at most 8192; with run: the run's"`
	Parallel    int                  `yaml:"parallel" doc:"episodes decoded together (KV sequences), 1..256"`
	Threads     int                  `yaml:"threads" doc:"CPU threads; 0 = all cores"`
	GPULayers   int                  `yaml:"gpu_layers" doc:"layers offloaded to a GPU backend; -1 = all"`
	Out         string               `yaml:"out" doc:"also write the JSON result to this file"`
	EpisodesOut string               `yaml:"episodes_out" doc:"also write every episode played (setting, trial, task, variation, score, end, and per step the tip block shown, the response, the action and the observation) to this file, one JSON object per line"`
	Rollout     rollout.Config       `yaml:"rollout" doc:"how episodes are played: prompt, step limit, action correction, tip writing, success score (rollout.temperature is training's; eval samples at eval.temperature); with run: the run's"`
	Memory      rollout.MemoryConfig `yaml:"memory" doc:"tips memory: embedder and retrieval; with run: the run's"`

	// ConfigFile is the configuration file the command read (an input of
	// the output guard); Force lets out replace an existing file.
	ConfigFile string `yaml:"-"`
	Force      bool   `yaml:"-"`
	// Plan, when set, is told what will be played before the first episode.
	Plan func(Plan) `yaml:"-"`
	// Progress, when set, is called after every finished episode.
	Progress func(done, total int) `yaml:"-"`
	// Warn, when set, receives warnings (a context too small for the first
	// prompt, a run without a checkpoint).
	Warn func(string) `yaml:"-"`
}

// DefaultRunConfig is `empo2 eval` without a file, a run or flags: textlab,
// 1 episode of every test variation of every task not held out at the
// reference's validation temperature 0.4, memory off, seed 1, 2048 tokens
// per episode, 8 episodes at a time; the rollout and memory sections are
// rollout's defaults.
func DefaultRunConfig() RunConfig {
	return RunConfig{
		Checkpoint: CheckpointLatest,
		Env:        "textlab",
		Eval:       Protocol{Episodes: 1, Split: environments.Test, Temperature: 0.4, Memory: MemoryOff},
		Trials:     3,
		Seed:       1,
		Context:    2048,
		Parallel:   8,
		Rollout:    rollout.DefaultConfig(),
		Memory:     rollout.DefaultMemoryConfig(),
	}
}

// ErrRunConfig wraps every problem with an eval configuration: an unknown
// key (with its line), a bad value (naming the key).
var ErrRunConfig = errors.New("trainer: bad eval configuration")

// runSchema documents RunConfig (from its doc tags) and decodes, overrides
// and prints it.
var runSchema = config.New(DefaultRunConfig, ErrRunConfig)

// DecodeRunConfig decodes a YAML document onto c strictly (an unknown key
// is an error naming it and its line); what names the source in errors.
func DecodeRunConfig(b []byte, c *RunConfig, what string) error {
	return runSchema.Decode(strings.NewReader(string(b)), c, what)
}

// Set applies one override "key.path=value" (value is YAML) to c.
func (c *RunConfig) Set(kv string) error { return runSchema.Set(c, kv) }

// PrintRunConfig writes c as commented YAML (`empo2 eval --print-config`).
func PrintRunConfig(w io.Writer, c RunConfig) error {
	return runSchema.Print(w, c)
}

// RunConfigReference is the Markdown table of every key of RunConfig
// (docs/eval.md embeds it).
func RunConfigReference() string { return runSchema.Reference() }

// LoadRunConfig resolves an eval configuration without a run's settings:
// the defaults, then file (strict; "" = none), then the overrides.
// trainer.LoadEvalConfig is the same with a run's settings as defaults.
func LoadRunConfig(file string, sets []string) (RunConfig, error) { return runSchema.Load(file, sets) }

// ReadRunConfigFile reads a configuration file for ApplyRunConfig ("" =
// none: nil); its error wraps ErrRunConfig.
func ReadRunConfigFile(file string) ([]byte, error) { return runSchema.ReadFile(file) }

// ApplyRunConfig decodes raw (nil: none) onto c strictly, what naming it
// in errors, then applies the overrides in order: LoadRunConfig's layers
// over other defaults (trainer.LoadEvalConfig: a run's settings).
func ApplyRunConfig(c *RunConfig, raw []byte, what string, sets []string) error {
	return runSchema.Apply(c, raw, what, sets)
}

// TaskNames turns task specs into task names: "task/N" (one variation, as
// a training run names it) stands for the task; duplicates go.
func TaskNames(specs []string) []string {
	var out []string
	for _, t := range specs {
		name := strings.TrimSpace(t)
		if i := strings.LastIndex(name, "/"); i > 0 {
			name = name[:i]
		}
		if name != "" && !contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// checkpointStep parses Checkpoint: -1 for latest, -2 for base, else the step.
func (c *RunConfig) checkpointStep() (int, error) {
	switch c.Checkpoint {
	case CheckpointLatest:
		return -1, nil
	case CheckpointBase:
		return -2, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(c.Checkpoint))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: checkpoint %q: want latest, base or a step number ≥ 0", ErrRunConfig, c.Checkpoint)
	}
	return n, nil
}

// Validate checks every key's range before anything is opened; errors
// name the key and the value.
func (c *RunConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrRunConfig}, a...)...) }
	if _, err := c.checkpointStep(); err != nil {
		return err
	}
	p := &c.Eval
	switch {
	case c.Model == "":
		return bad("no model: give model (-m FILE) or run (--run DIR)")
	case c.Env == "":
		return bad("env is empty")
	case c.Run == "" && c.Checkpoint != CheckpointLatest:
		return bad("checkpoint %s needs run (a training run directory)", c.Checkpoint)
	case c.LoRA != "" && c.Checkpoint != CheckpointLatest:
		return bad("lora and checkpoint both name an adapter; give one")
	case p.Episodes < 1:
		return bad("eval.episodes %d: want at least 1", p.Episodes)
	case p.MaxVariations < 0:
		return bad("eval.max_variations %d: want ≥ 0 (0 = all)", p.MaxVariations)
	case !p.Split.Valid():
		return bad("eval.split %q: want train, dev or test", p.Split)
	case !finite(p.Temperature) || p.Temperature < 0 || p.Temperature > 100:
		return bad("eval.temperature %v: want 0 (greedy) to 100", p.Temperature)
	case !p.Memory.Valid():
		return bad("eval.memory %q: want off, on or both", p.Memory)
	case c.OOD && p.Memory != MemoryOff:
		return bad("ood plays memory on and off itself: leave eval.memory off (drop --memory)")
	case c.Trials < 1 || c.Trials > maxTrials:
		return bad("trials %d: want 1..%d (each trial is a full pass over the held-out variations)", c.Trials, maxTrials)
	case c.Context != 0 && c.Context < 16:
		return bad("context %d: want 0 (the model's) or at least 16 tokens per episode", c.Context)
	case c.Parallel < 1 || c.Parallel > 256:
		return bad("parallel %d: want 1..256", c.Parallel)
	case c.Context > maxContext(c.Parallel):
		return bad("context (--ctx) %d: want 0 (the model's) or 16..%d tokens per episode with parallel %d (llama.cpp holds at most %d tokens per sequence and %d KV cells in all)",
			c.Context, maxContext(c.Parallel), c.Parallel, maxSeqTokens, llama.MaxContextCells)
	case c.Threads < 0:
		return bad("threads %d: want ≥ 0 (0 = all cores)", c.Threads)
	case c.GPULayers < -1:
		return bad("gpu_layers %d: want ≥ -1 (-1 = all)", c.GPULayers)
	case !finite(c.Rollout.SuccessScore):
		return bad("rollout.success_score %v: want a finite score", c.Rollout.SuccessScore)
	case !finite(c.Rollout.TipTemperature) || c.Rollout.TipTemperature > 100:
		return bad("rollout.tip_temperature %v: want at most 100 (< 0: eval.temperature)", c.Rollout.TipTemperature)
	case c.Rollout.TipMaxTokens < 1:
		return bad("rollout.tip_max_tokens %d: want at least 1", c.Rollout.TipMaxTokens)
	case c.Rollout.StepLimit < 0:
		return bad("rollout.step_limit %d: want ≥ 0 (0 = the environment's)", c.Rollout.StepLimit)
	case c.Rollout.Prompt.MaxActionTokens < 1 || c.Rollout.Prompt.MaxActionTokens > maxActionTokens:
		return bad("rollout.max_action_tokens (--max-action-tokens) %d: want 1..%d tokens per action", c.Rollout.Prompt.MaxActionTokens, maxActionTokens)
	case !c.Rollout.Prompt.History.Valid():
		return bad("rollout.history %q: want full or last-k", c.Rollout.Prompt.History)
	case c.Rollout.Prompt.HistoryK < 1:
		return bad("rollout.history_k %d: want at least 1", c.Rollout.Prompt.HistoryK)
	case !c.Rollout.Prompt.ActionFormat.Valid():
		return bad("rollout.action_format %q: want naive or cot", c.Rollout.Prompt.ActionFormat)
	case !finite(c.Memory.Threshold) || c.Memory.Threshold < -1 || c.Memory.Threshold >= 1:
		return bad("memory.threshold %v: want a cosine in [-1, 1)", c.Memory.Threshold)
	case c.Memory.TopK < 1:
		return bad("memory.top_k %d: want at least 1", c.Memory.TopK)
	case c.Memory.Embedder == "":
		return bad("memory.embedder is empty: want hash, policy or a GGUF file")
	case c.EnvOptions.StepLimit < 0:
		return bad("env_options.step_limit %d: want ≥ 0 (0 = the task's own)", c.EnvOptions.StepLimit)
	case c.Run == "" && c.MemoryDB != "" && p.Memory == MemoryOff && !c.OOD:
		return bad("memory_db is used with eval.memory on or both")
	case p.Memory != MemoryOff && c.MemoryDB == "":
		return bad("eval.memory %s needs memory_db (--memory-db FILE) or run (--run DIR)", p.Memory)
	}
	return nil
}

// checkOutputs refuses an out that is not a file path, is one of the
// inputs (configuration file, model, adapter, memory, embedder), lies
// inside a run directory (any run's, but as eval/*.json of a run) or
// exists (unless Force), before anything is opened.
func (c *RunConfig) checkOutputs() error {
	in := []safefile.Path{{Flag: "--config", Path: c.ConfigFile}, {Flag: "model", Path: c.Model}, {Flag: "lora", Path: c.LoRA},
		{Flag: "run", Path: c.Run, Dir: true}}
	for _, p := range memstore.Files(c.MemoryDB) {
		in = append(in, safefile.Path{Flag: "memory_db", Path: p})
	}
	if e := c.Memory.Embedder; e != rollout.EmbedderHash && e != rollout.EmbedderPolicy {
		in = append(in, safefile.Path{Flag: "memory.embedder", Path: e})
	}
	out := []safefile.Path{{Flag: "out", Path: c.Out, RunLayout: []string{RunEvalDir + "/*.json", RunEvalDir + "/ood/*.json"}},
		{Flag: "episodes_out", Path: c.EpisodesOut}}
	return safefile.CheckWrite(out, in, c.Force)
}

// Plan is what an evaluation will play, told before its first episode.
type Plan struct {
	Split      environments.Split
	Tasks      []string
	Variations int             // task variations in all
	Episodes   int             // per variation and setting (ood: per trial)
	Settings   []MemorySetting // memory settings played (ood: on and off)
	Trials     int             // ood: consecutive trials; 0 otherwise
	Total      int             // episodes in all

	firstVariation int // of Tasks[0], whose first prompt Run measures
}

// String is the plan in one line, e.g. "melt: 2 test variations × 1
// episode × 2 settings (off, on) = 4 episodes".
func (p Plan) String() string {
	s := make([]string, len(p.Settings))
	for i, m := range p.Settings {
		s[i] = string(m)
	}
	plural := func(n int, w string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, w)
		}
		return fmt.Sprintf("%d %ss", n, w)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s variations", strings.Join(p.Tasks, ", "), strconv.Itoa(p.Variations), p.Split)
	if p.Trials > 0 {
		fmt.Fprintf(&b, " × %s", plural(p.Trials, "trial"))
	} else {
		fmt.Fprintf(&b, " × %s", plural(p.Episodes, "episode"))
	}
	fmt.Fprintf(&b, " × %s (%s) = %s", plural(len(s), "setting"), strings.Join(s, ", "), plural(p.Total, "episode"))
	return b.String()
}

// RunResult is what Run did.
type RunResult struct {
	Config  RunConfig  // as run (the adapter resolved)
	Report  *Report    // without ood
	OOD     *OODReport // with ood
	Step    int        // checkpoint step of the adapter; -1 = not a run's checkpoint
	Adapter string     // the adapter evaluated ("" = none)
	JSON    []byte     // the result as written (indented, with a final newline)
	Written []string   // files written
}

// resolveAdapter picks the adapter: lora, else the run's checkpoint.
func (c *RunConfig) resolveAdapter(warn func(string)) (adapter string, step int, err error) {
	if c.LoRA != "" {
		return c.LoRA, -1, nil
	}
	if c.Run == "" {
		return "", -1, nil
	}
	n, _ := c.checkpointStep()
	switch n {
	case -2:
		return "", -1, nil
	case -1:
		info, ok, err := optim.LatestCheckpoint(c.Run)
		if err != nil {
			return "", -1, err
		}
		if !ok {
			warn(fmt.Sprintf("the run %s has no checkpoint yet: evaluating the base model", c.Run))
			return "", -1, nil
		}
		return filepath.Join(info.Dir, optim.AdapterFile), info.Step, nil
	}
	p := filepath.Join(c.Run, optim.CheckpointsDir, optim.CheckpointName(n), optim.AdapterFile)
	if _, err := os.Stat(p); err != nil {
		return "", -1, fmt.Errorf("%w: checkpoint %d of %s: %w", ErrRunConfig, n, c.Run, err)
	}
	return p, n, nil
}

// memoryCoverage is a warning when the memory holds tips for none of the
// variations cfg evaluates (memory is kept per task variation: a run's
// memory holds its train split's), "" otherwise.
func memoryCoverage(tasks []environments.Task, cfg RunConfig, namespaces []string) string {
	vars, err := evalVariations(tasks, cfg.Eval.Split, cfg.Eval.MaxVariations)
	if err != nil || len(vars) == 0 {
		return ""
	}
	have := map[string]bool{}
	for _, n := range namespaces {
		have[n] = true
	}
	for _, tv := range vars {
		if have[rollout.Job{Task: tv[0].(string), Variation: tv[1].(int)}.Namespace()] {
			return ""
		}
	}
	held := fmt.Sprintf("it holds tips of %d other variations", len(namespaces))
	if len(namespaces) > 0 {
		held += ", e.g. " + namespaces[0]
	}
	return fmt.Sprintf("the memory %s holds no tips for any of the %d evaluated %s variations (%s; tips are kept per task variation, and training writes them for its train split): memory on retrieves nothing and plays as memory off; evaluate the split the memory was written on (--split train), or let eval write tips (--write-tips)",
		cfg.MemoryDB, len(vars), cfg.Eval.Split, held)
}

// opened is what Run opens, closed in reverse order.
type opened struct {
	model    *llama.Model
	lctx     *llama.Context
	adapter  *llama.Adapter
	store    *memstore.Store
	embClose func() error
	pool     *environments.Pool
}

func (o *opened) Close() error {
	var errs []error
	if o.pool != nil {
		errs = append(errs, o.pool.Close())
	}
	if o.store != nil {
		errs = append(errs, o.store.Close())
	}
	if o.embClose != nil {
		errs = append(errs, o.embClose())
	}
	o.lctx.Close()
	o.adapter.Close()
	o.model.Close()
	return errors.Join(errs...)
}

// Run evaluates what cfg names: it validates every key and checks the
// output against the inputs before opening anything, loads the model (and
// the adapter: lora, else the run's checkpoint), the tips memory (read
// only unless write_tips), plays Evaluate or, with ood, EvaluateOOD, and
// writes the JSON result to out and, with run, to the run's eval/ folder
// (eval-<split>-<memory>-step-NNNNNN.json; ood-<split>-k<K>-step-NNNNNN.json
// in eval/ood). A context too small for the first prompt is a warning, and
// so are episodes that mostly ended on a full context.
// A cancelled ctx stops after the episodes in play, closes everything and
// writes nothing.
func Run(ctx context.Context, cfg RunConfig) (res *RunResult, err error) {
	warn := cfg.Warn
	if warn == nil {
		warn = func(string) {}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkOutputs(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.Model); err != nil {
		return nil, fmt.Errorf("%w: model: %w", ErrRunConfig, err)
	}
	adapter, step, err := cfg.resolveAdapter(warn)
	if err != nil {
		return nil, err
	}
	memory := cfg.Eval.Memory != MemoryOff && !cfg.OOD
	if memory && !cfg.WriteTips {
		if _, err := os.Stat(cfg.MemoryDB); err != nil {
			return nil, fmt.Errorf("%w: memory_db: %w (eval reads an existing memory; write_tips creates one)", ErrRunConfig, err)
		}
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	o := &opened{}
	defer func() {
		if cerr := o.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if o.model, err = llama.LoadModel(cfg.Model, llama.ModelParams{GPULayers: cfg.GPULayers}); err != nil {
		return nil, err
	}
	cfg.Context = rollout.EpisodeContext(cfg.Context, o.model.Info().NCtxTrain)
	if o.lctx, err = llama.NewContext(o.model, llama.ContextParams{NCtx: cfg.Context, NSeqMax: cfg.Parallel, Threads: threads}); err != nil {
		return nil, err
	}
	if adapter != "" {
		if o.adapter, err = o.model.LoadAdapter(adapter); err != nil {
			return nil, err
		}
		if err := o.lctx.SetAdapter(o.adapter, 1); err != nil {
			return nil, err
		}
	}
	if memory {
		emb, closeEmb, err := rollout.OpenEmbedder(cfg.Memory, o.model, threads)
		if err != nil {
			return nil, err
		}
		o.embClose = closeEmb
		// opened for writing even when eval only reads it (the roller's
		// ReadOnlyMemory refuses tips): SQLite then removes its -wal and
		// -shm files when the store closes, a read-only open leaves them
		if o.store, err = memstore.Open(cfg.MemoryDB, emb); err != nil {
			return nil, err
		}
	}
	rc := cfg.Rollout
	rc.Temperature = cfg.Eval.Temperature
	// one instance per episode in play, reused (ScienceWorld: a JVM each,
	// started once, not once per episode), as training's
	if o.pool, err = environments.NewPool(cfg.Env, cfg.EnvOptions, cfg.Parallel); err != nil {
		return nil, fmt.Errorf("%w: env %s: %w", ErrRunConfig, cfg.Env, err)
	}
	roller, err := rollout.NewRoller(o.lctx, rc, rollout.Options{
		Env: cfg.Env, EnvOptions: cfg.EnvOptions, Memory: o.store, MemoryConfig: cfg.Memory, Pool: o.pool,
		ReadOnlyMemory: !cfg.WriteTips, Seed: cfg.Seed, OracleTip: demos.TrajectoryTip,
	})
	if err != nil {
		return nil, err
	}
	res = &RunResult{Config: cfg, Step: step, Adapter: adapter}
	res.Config.LoRA = adapter
	// the plan, and whether the first prompt fits the context
	plan := func(p Plan) {
		if len(p.Tasks) > 0 {
			if fit, err := roller.FirstPrompt(ctx, p.Tasks[0], p.firstVariation); err == nil && !fit.Fits() {
				warn(fmt.Sprintf("the first prompt of %s is %d tokens; with %d action tokens it does not fit the context of %d tokens per episode: such episodes end before their first action (raise context, --ctx)",
					p.Tasks[0], fit.Prompt, fit.MaxAction, fit.Context))
			}
		}
		if cfg.Plan != nil {
			cfg.Plan(p)
		}
	}
	var out any
	// episodes_out's lines, kept only when asked for
	var transcripts bytes.Buffer
	var keep func(MemorySetting, int, []rollout.Episode) error
	if cfg.EpisodesOut != "" {
		keep = func(s MemorySetting, k int, eps []rollout.Episode) error {
			return transcriptLines(&transcripts, s, k, eps)
		}
	}
	if cfg.OOD {
		emb, closeEmb, err := rollout.OpenEmbedder(cfg.Memory, o.model, threads)
		if err != nil {
			return nil, err
		}
		defer closeEmb()
		rep, err := EvaluateOOD(ctx, roller, OODConfig{
			Tasks: TaskNames(cfg.Tasks), Split: cfg.Eval.Split, MaxVariations: cfg.Eval.MaxVariations,
			Trials: cfg.Trials, Temperature: cfg.Eval.Temperature, Seed: cfg.Seed, Embedder: emb,
			Progress: cfg.Progress, Plan: plan, Episodes: keep,
		})
		if err != nil {
			return nil, err
		}
		res.OOD, out = rep, rep
	} else {
		if memory && !cfg.WriteTips {
			if tasks, err := evalTasks(roller, TaskNames(cfg.Tasks), false); err == nil {
				if w := memoryCoverage(tasks, cfg, o.store.Namespaces()); w != "" {
					warn(w)
				}
			}
		}
		rep, err := Evaluate(ctx, roller, Config{
			Protocol: cfg.Eval, Tasks: TaskNames(cfg.Tasks), Seed: cfg.Seed,
			WriteTips: cfg.WriteTips, TrainStep: int64(max(step, 0)), Progress: cfg.Progress, Plan: plan,
		})
		if err != nil {
			return nil, err
		}
		res.Report, out = rep, rep
		if keep != nil {
			if err := keep(MemoryOff, 0, rep.OffEpisodes); err != nil {
				return nil, err
			}
			if err := keep(MemoryOn, 0, rep.OnEpisodes); err != nil {
				return nil, err
			}
		}
		for _, r := range []*Result{rep.MemoryOff, rep.MemoryOn} {
			if r == nil {
				continue
			}
			if w := rollout.ContextWarning(r.EndReasons, o.lctx.NCtxSeq()); w != "" {
				warn(w)
				break
			}
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEval, err)
	}
	res.JSON = append(b, '\n')
	if cfg.Run != "" && cfg.LoRA != "" {
		// not one of the run's checkpoints: filed in the run it would read
		// as the run's own result
		warn(fmt.Sprintf("lora %s is not a checkpoint of the run %s: the result is not filed in %s (it would read as the run's step 0); keep it with out (-o FILE)",
			cfg.LoRA, cfg.Run, filepath.Join(cfg.Run, RunEvalDir)))
	} else if cfg.Run != "" {
		kind, sub := fmt.Sprintf("eval-%s-%s", cfg.Eval.Split, cfg.Eval.Memory), RunEvalDir
		if cfg.OOD {
			kind, sub = fmt.Sprintf("ood-%s-k%d", cfg.Eval.Split, cfg.Trials), filepath.Join(RunEvalDir, "ood")
		}
		p := filepath.Join(cfg.Run, sub, fmt.Sprintf("%s-step-%06d.json", kind, max(step, 0)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEval, err)
		}
		if err := safefile.WriteFile(p, res.JSON, 0o644); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEval, err)
		}
		res.Written = append(res.Written, p)
	}
	if cfg.Out != "" {
		if err := safefile.WriteFile(cfg.Out, res.JSON, 0o644); err != nil {
			return nil, fmt.Errorf("%w: out: %w", ErrEval, err)
		}
		res.Written = append(res.Written, cfg.Out)
	}
	if cfg.EpisodesOut != "" {
		if err := safefile.WriteFile(cfg.EpisodesOut, transcripts.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("%w: episodes_out: %w", ErrEval, err)
		}
		res.Written = append(res.Written, cfg.EpisodesOut)
	}
	return res, nil
}
