package demos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/config"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// `empo2 env demos` as one library call, like sft.Run and evaluate.Run:
// RunConfig is the command's whole configuration (a YAML file, --set, the
// flags as shortcuts; documented by its doc tags, its defaults in
// DefaultRunConfig), Run plays the demos and writes the JSONL (and the
// text corpus).

// RunConfig configures Run: `empo2 env demos`'s configuration.
type RunConfig struct {
	Env            string               `yaml:"env" doc:"environment: textlab | webshop | scienceworld"`
	EnvOptions     environments.Options `yaml:"env_options" doc:"options passed to the environment"`
	Tasks          []string             `yaml:"tasks,flow" doc:"tasks played, in this order; empty = every task not held out"`
	HeldOut        bool                 `yaml:"held_out" doc:"with no tasks, also play the held-out tasks"`
	Split          environments.Split   `yaml:"split" doc:"variation split: train | dev | test"`
	Variations     int                  `yaml:"variations" doc:"at most this many variations per task, the first of the split after skip_variations; 0 = all"`
	SkipVariations int                  `yaml:"skip_variations" doc:"leave out the first variations of the split per task (e.g. those an RL run trains on)"`
	Kind           Kind                 `yaml:"kind" doc:"gold (the environment's gold actions) | explore (gold work, observable room search instead of its moves; needs the teleport simplification, e.g. env_options.simplifications easy)"`
	Tour           Tour                 `yaml:"tour" doc:"explore demos' search order: doors (rooms named in the task, then doors in order of discovery: predictable from the observations) | random (a seeded random order: only a memory of the tour predicts it; for memory-reading records) | random-direct (random, but a room the task names is reached by one teleport once the work has begun: find-living-thing's box room)"`
	PerStep        bool                 `yaml:"per_step" doc:"one record per step instead of one packed record per episode (history last-k needs this)"`
	NoTips         bool                 `yaml:"no_tips" doc:"leave out the tip-writing turn after each episode"`
	Seed           int64                `yaml:"seed" doc:"reset seed (the failed attempts and astray attempts draw from it too)"`
	Out            string               `yaml:"out" doc:"the chat JSONL written (required)"`
	Text           string               `yaml:"text" doc:"also write every message's text to this file (a corpus for empo2 model init --corpus); empty = none"`
	Prompt         rollout.PromptConfig `yaml:"prompt" doc:"the rollouts' prompt format the records are written in"`
	TipRecords     int                  `yaml:"tip_records" doc:"per episode, also write this many one-step records whose prompts carry tips retrieved (hash embedder) from a memory of the demo and of failed attempts at its variation"`
	TipFailures    int                  `yaml:"tip_failures" doc:"failed attempts played per episode for tip_records"`
	FailureTips    bool                 `yaml:"failure_tips" doc:"with tip_records, also write each failed attempt's tip-writing turn"`
	Threshold      float64              `yaml:"threshold" doc:"retrieval cosine threshold of tip_records (memory.threshold)"`
	TopK           int                  `yaml:"top_k" doc:"tips per prompt of tip_records (memory.top_k)"`
	TipsIn         rollout.TipsIn       `yaml:"tips_in" doc:"where tip_records prompts keep their tips (memory.tips_in): every-turn | last-turn"`
	AttemptTips    int                  `yaml:"attempt_tips" doc:"per episode, also write this many tip-writing records after attempts that go astray (the demo's first actions, then random ones to the step limit), each answered with its true tip"`
	ReadRecords    int                  `yaml:"read_records" doc:"per episode, also write this many memory-reading records: a step's prompt with the memory block the rollout would show, retrieved from a memory of the demo and of attempts deviating from it (ReadRecords), answered with the demo's action"`
	ReadMemory     string               `yaml:"read_memory" doc:"with read_records: retrieve the blocks from this tips memory (e.g. a memory-only run's memory.db on the demos' variations: the policy's own attempts and tips, read-only) instead of a memory of the demo and attempts deviating from it; the records answer with the demo's action (OwnReadRecords); empty = none"`
	ReadTrials     int                  `yaml:"read_trials" doc:"with read_records: 0 = every record's block comes from one memory of the demo and all its deviating attempts; n ≥ 1 = each record has a memory of its own holding at most n episodes (the demo, or the attempt deviating at its step, and with n ≥ 2 sometimes one more), as an adaptation trial's memory holds the trials before it (ReadRecords); not with read_memory"`
	ReadShort      bool                 `yaml:"read_short" doc:"with read_records: each record keeps only the task's first turn (its answer as context) and the record's own turn with its block, the turns between dropped; a record whose step is the first is left out (many short records for the tokens of one full-history record)"`
	ReadWrongTips  float64              `yaml:"read_wrong_tips" doc:"with read_records (not read_memory): the probability that a stored episode (the demo or an attempt) shows another of the demo's episodes' tips instead of its own, so that only the entries' code-written action and score say what to do; the records' meta count such entries in their block (wrong_tips); 0 = every tip its own"`
	Key            rollout.KeyKind      `yaml:"key" doc:"retrieval key of tip_records and read_records (memory.key): conversation | observation"`

	// Plan, when set, is told the tasks and variations to play before the
	// first episode.
	Plan func(tasks, variations int) `yaml:"-"`
	// Warn, when set, receives warnings (a task left without variations,
	// a demo that does not complete its task and is skipped).
	Warn func(string) `yaml:"-"`
	// ConfigFile is the configuration file the command read (an input of
	// the output guard); Force lets out and text replace existing files.
	ConfigFile string `yaml:"-"`
	Force      bool   `yaml:"-"`
}

// DefaultRunConfig is `empo2 env demos` without a file or flags: gold
// demos of the train split's variations of every task not held out, one
// packed record per episode with its tip turn, seed 0, the default prompt,
// no tip records (their settings as DefaultTipRecordConfig's).
func DefaultRunConfig() RunConfig {
	t := DefaultTipRecordConfig()
	return RunConfig{
		Split:       environments.Train,
		Kind:        KindGold,
		Prompt:      rollout.DefaultPromptConfig(),
		TipFailures: t.Failures,
		Threshold:   t.Threshold,
		TopK:        t.TopK,
		TipsIn:      t.TipsIn,
		Key:         t.Key,
	}
}

// ErrRunConfig wraps every problem with an env demos configuration: an
// unknown key (with its line), a bad value (naming the key), an output
// that is an input.
var ErrRunConfig = errors.New("trainer: bad env demos configuration")

var runSchema = config.New(DefaultRunConfig, ErrRunConfig)

// LoadRunConfig resolves an env demos configuration: the defaults, the
// file (strict; "" = none), then the overrides "key.path=value".
func LoadRunConfig(file string, sets []string) (RunConfig, error) { return runSchema.Load(file, sets) }

// PrintRunConfig writes c as commented YAML (`empo2 env demos --print-config`).
func PrintRunConfig(w io.Writer, c RunConfig) error { return runSchema.Print(w, c) }

// RunConfigReference is the Markdown table of every key of RunConfig
// (docs/sft.md embeds it).
func RunConfigReference() string { return runSchema.Reference() }

// tipRecordConfig is the TipRecordConfig of c's tip_* keys.
func (c *RunConfig) tipRecordConfig(pc rollout.PromptConfig) TipRecordConfig {
	t := DefaultTipRecordConfig()
	t.Prompt, t.Records, t.Failures = pc, c.TipRecords, c.TipFailures
	t.TopK, t.Threshold, t.Seed = c.TopK, c.Threshold, c.Seed
	t.FailureTips, t.TipsIn, t.Key = c.FailureTips, c.TipsIn, c.Key
	t.ReadTrials, t.ReadShort, t.WrongTips = c.ReadTrials, c.ReadShort, c.ReadWrongTips
	return t
}

// resolved is what Validate derives from a RunConfig.
type resolved struct {
	spec  environments.Spec
	split environments.Split
	pc    rollout.PromptConfig
	tips  TipRecordConfig
}

// validate checks every key before anything is opened or played.
func (c *RunConfig) validate() (resolved, error) {
	var r resolved
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrRunConfig}, a...)...) }
	if c.Env == "" {
		return r, bad("env is required (environments: %s)", strings.Join(environments.Names(), ", "))
	}
	if c.Out == "" {
		return r, bad("out is required (--out)")
	}
	var err error
	if r.spec, err = environments.Lookup(c.Env); err != nil {
		return r, err
	}
	if c.EnvOptions.StepLimit < 0 {
		return r, bad("env_options.step_limit %d: want a positive number of steps (0: the task's own)", c.EnvOptions.StepLimit)
	}
	if r.split, err = environments.ParseSplit(string(c.Split)); err != nil {
		return r, err
	}
	if r.pc, err = c.Prompt.Normalize(); err != nil {
		return r, err
	}
	if !c.Kind.Valid() {
		return r, bad("kind %q: want %s or %s", c.Kind, KindGold, KindExplore)
	}
	if !c.Tour.Valid() {
		return r, bad("tour %q: want %s, %s or %s", c.Tour, TourDoors, TourRandom, TourRandomDirect)
	}
	if c.Tour.random() && c.Kind != KindExplore {
		return r, bad("tour %s orders explore demos' room search: give kind %s (--kind %s)", c.Tour, KindExplore, KindExplore)
	}
	if r.pc.History != rollout.HistoryFull && !c.PerStep {
		return r, bad("prompt.history %s changes the prompt at every step: set per_step (--per-step)", r.pc.History)
	}
	if c.Variations < 0 {
		return r, bad("variations %d is negative", c.Variations)
	}
	if c.SkipVariations < 0 {
		return r, bad("skip_variations %d is negative", c.SkipVariations)
	}
	if c.ReadTrials < 0 {
		return r, bad("read_trials %d is negative", c.ReadTrials)
	}
	r.tips = c.tipRecordConfig(r.pc)
	if err := r.tips.Check(); err != nil {
		return r, err
	}
	if c.AttemptTips < 0 {
		return r, bad("attempt_tips %d is negative", c.AttemptTips)
	}
	if c.ReadRecords < 0 {
		return r, bad("read_records %d is negative", c.ReadRecords)
	}
	if c.ReadMemory != "" && c.ReadRecords == 0 {
		return r, bad("read_memory %s is used only by read_records: give read_records (--read-records N) too", c.ReadMemory)
	}
	if c.ReadTrials != 0 && (c.ReadRecords == 0 || c.ReadMemory != "") {
		return r, bad("read_trials %d: needs read_records and no read_memory (it shapes the memories read records are built from)", c.ReadTrials)
	}
	if c.ReadShort && c.ReadRecords == 0 {
		return r, bad("read_short shortens read records: give read_records (--read-records N) too")
	}
	if c.ReadWrongTips != 0 && (c.ReadRecords == 0 || c.ReadMemory != "") {
		return r, bad("read_wrong_tips %g: needs read_records and no read_memory (it rewrites the tips of the memories read records are built from)", c.ReadWrongTips)
	}
	if c.ReadRecords > 0 {
		rt := r.tips
		rt.Records, rt.FailureTips = c.ReadRecords, false
		if err := rt.Check(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// Validate checks every key before anything is opened; errors name the
// key and the value.
func (c *RunConfig) Validate() error {
	_, err := c.validate()
	return err
}

// RunResult is what Run wrote (so far, when it returns an error).
type RunResult struct {
	Episodes, Steps, Records int
	TipRecords               int // records with retrieved tips (tip_records)
	FailTips                 int // failed attempts' tip turns (failure_tips)
	AttemptTips              int // tip turns after astray attempts (attempt_tips)
	ReadRecords              int // memory-reading records (read_records)
	Skipped                  int // demos that did not complete their task
	Kind                     Kind
	Split                    environments.Split
	History                  rollout.History
}

// PickTasks returns the named tasks of all (in the given order), or, with
// no names, every task that is not held out (held-out ones too with
// heldOut).
func PickTasks(all []environments.Task, names []string, heldOut bool) ([]environments.Task, error) {
	var tasks []environments.Task
	for _, n := range names {
		t, err := environments.FindTask(all, n)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	if len(names) > 0 {
		return tasks, nil
	}
	for _, t := range all {
		if !t.HeldOut || heldOut {
			tasks = append(tasks, t)
		}
	}
	return tasks, nil
}

// Run plays what cfg says and writes its demos: every key is checked and
// the outputs against the inputs before anything is opened; each
// variation's demo (gold or explore) is played and, when it completes its
// task with a positive score, written as Records (plus TipRecords and
// AttemptTipRecords when asked for); the JSONL appears whole at the end
// (nothing is written when no demo completes or on an error). A cancelled
// ctx stops with its error; RunResult counts what was played.
func Run(ctx context.Context, cfg RunConfig) (RunResult, error) {
	warn := cfg.Warn
	if warn == nil {
		warn = func(string) {}
	}
	r, err := cfg.validate()
	if err != nil {
		return RunResult{}, err
	}
	res := RunResult{Kind: cfg.Kind, Split: r.split, History: r.pc.History}
	outs := []safefile.Path{{Flag: "out", Path: cfg.Out}, {Flag: "text", Path: cfg.Text}}
	if err := safefile.CheckWrite(outs,
		[]safefile.Path{{Flag: "--config", Path: cfg.ConfigFile}, {Flag: "env_options.data_dir", Path: cfg.EnvOptions.DataDir, Dir: true},
			{Flag: "env_options.jar", Path: cfg.EnvOptions.Jar}, {Flag: "--read-memory", Path: cfg.ReadMemory}}, cfg.Force); err != nil {
		return res, err
	}
	opts := cfg.EnvOptions
	all, err := r.spec.Tasks(opts)
	if err != nil {
		return res, err
	}
	tasks, err := PickTasks(all, cfg.Tasks, cfg.HeldOut)
	if err != nil {
		return res, err
	}
	// the variations of each task, before anything is played or written
	skip, nvars, split := cfg.SkipVariations, cfg.Variations, r.split
	taskVars := make([][]int, len(tasks))
	var left int
	var exhausted []string
	for i, t := range tasks {
		vars, err := t.VariationsIn(split)
		if err != nil {
			return res, err
		}
		if skip >= len(vars) {
			exhausted = append(exhausted, fmt.Sprintf("%s has %d", t.Name, len(vars)))
			continue
		}
		vars = vars[skip:]
		if nvars > 0 && nvars < len(vars) {
			vars = vars[:nvars]
		}
		taskVars[i], left = vars, left+len(vars)
	}
	if left == 0 {
		return res, fmt.Errorf("--skip-variations %d leaves no variation to play: %s %s variations", skip, strings.Join(exhausted, ", "), split)
	}
	for _, e := range exhausted {
		warn(fmt.Sprintf("--skip-variations %d leaves no variation of a task: %s %s variations", skip, e, split))
	}
	env, err := r.spec.New(opts)
	if err != nil {
		return res, err
	}
	defer env.Close()
	w, err := safefile.Create(cfg.Out, 0o644)
	if err != nil {
		return res, err
	}
	defer w.Abort()
	var text strings.Builder
	dcfg := Config{Prompt: r.pc, PerStep: cfg.PerStep, NoTips: cfg.NoTips}
	var mem *memstore.Store // the memory tip_records retrieves from (a temporary file)
	if r.tips.Records > 0 || cfg.ReadRecords > 0 {
		dir, err := os.MkdirTemp("", "empo2-demo-tips-*")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		mem, err = memstore.Open(filepath.Join(dir, "tips.db"), memstore.NewHashEmbedder(memstore.DefaultDim).WithMaxPieces(rollout.DefaultKeyPieces))
		if err != nil {
			return res, err
		}
		defer mem.Close()
	}
	var own *memstore.Store // read_memory: the policy's own attempts (read-only)
	if cfg.ReadMemory != "" {
		own, err = memstore.OpenFile(cfg.ReadMemory, memstore.AccessRead)
		if err != nil {
			return res, fmt.Errorf("%w: read_memory: %w", ErrDemo, err)
		}
		defer own.Close()
		// the hash embedder the records' own memory uses (above): a database
		// written with another embedder is refused by SetEmbedder
		if err := own.SetEmbedder(memstore.NewHashEmbedder(memstore.DefaultDim).WithMaxPieces(rollout.DefaultKeyPieces)); err != nil {
			return res, fmt.Errorf("%w: read_memory %s: %w", ErrDemo, cfg.ReadMemory, err)
		}
	}
	if cfg.Plan != nil {
		cfg.Plan(len(tasks), left)
	}
	for i, t := range tasks {
		for _, v := range taskVars[i] {
			var d Demo
			if cfg.Kind == KindExplore {
				d, err = ExploreTour(ctx, env, cfg.Env, t.Name, v, cfg.Seed, cfg.Tour)
			} else {
				d, err = Gold(ctx, env, cfg.Env, t.Name, v, cfg.Seed)
			}
			if err == nil {
				err = ctx.Err()
			} else if errors.Is(err, ErrOddVariation) && ctx.Err() == nil {
				res.Skipped++
				warn(fmt.Sprintf("skipped: task %s variation %d: %v", t.Name, v, err))
				continue
			}
			if err != nil {
				return res, err
			}
			watch.From(ctx).Add(1) // progress: variations played
			if !d.Done || d.Score <= 0 {
				res.Skipped++
				warn(fmt.Sprintf("demo does not complete the task: skipped: task %s variation %d score %s done %v", t.Name, v, fmtScore(d.Score), d.Done))
				continue
			}
			recs, err := Records(d, dcfg)
			if err != nil {
				return res, err
			}
			if cfg.ReadRecords > 0 {
				rt := r.tips
				rt.Records = cfg.ReadRecords
				var rrecs []sft.ChatRecord
				if own != nil {
					rrecs, err = OwnReadRecords(ctx, d, own, rt)
				} else {
					rrecs, err = ReadRecords(ctx, env, d, mem, rt)
				}
				if err != nil {
					return res, err
				}
				recs = append(recs, rrecs...)
				res.ReadRecords += len(rrecs)
			}
			if r.tips.Records > 0 {
				trecs, err := TipRecords(ctx, env, d, mem, r.tips)
				if err != nil {
					return res, err
				}
				recs = append(recs, trecs...)
				for _, rec := range trecs {
					if rec.Meta["failed"] == true {
						res.FailTips++
					} else {
						res.TipRecords++
					}
				}
			}
			arecs, err := AttemptTipRecords(ctx, env, d, cfg.AttemptTips, environments.StepLimit(t, opts), r.pc, cfg.Seed)
			if err != nil {
				return res, err
			}
			recs = append(recs, arecs...)
			res.AttemptTips += len(arecs)
			if err := sft.WriteChatJSONL(w, recs); err != nil {
				return res, err
			}
			if cfg.Text != "" {
				for _, rec := range recs {
					for _, m := range rec.Messages {
						text.WriteString(m.Content)
						text.WriteByte('\n')
					}
				}
			}
			res.Episodes++
			res.Steps += len(d.Steps)
			res.Records += len(recs)
		}
	}
	if res.Episodes == 0 {
		return res, fmt.Errorf("%w: no demonstration completed its task (%d skipped); nothing written", ErrDemo, res.Skipped)
	}
	if cfg.Text != "" {
		if err := safefile.WriteFile(cfg.Text, []byte(text.String()), 0o644); err != nil {
			return res, err
		}
	}
	return res, w.Commit()
}
