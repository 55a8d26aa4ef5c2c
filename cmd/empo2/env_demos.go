package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/trainer/demos"
	"github.com/empo2/empo2/trainer/rollout"
)

// `empo2 env demos`: demonstrations as chat JSONL for `empo2 sft`
// (docs/sft.md).

var (
	demosTasksFlag   = &cli.StringSliceFlag{Name: "tasks", Usage: "task `NAMES` (comma-separated or repeated; default: every task not held out)"}
	demosSplitFlag   = &cli.StringFlag{Name: "split", Usage: "variation split: train, dev or test", Value: "train"}
	demosVarsFlag    = &cli.IntFlag{Name: "variations", Usage: "at most `N` variations per task, the first of the split (after --skip-variations; 0: all)"}
	demosSkipFlag    = &cli.IntFlag{Name: "skip-variations", Usage: "leave out the first `N` variations of the split per task (e.g. those an RL run trains on)"}
	demosOutFlag     = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "JSONL `FILE` to write (required)"}
	demosPerStepFlag = &cli.BoolFlag{Name: "per-step", Usage: "one record per step instead of one packed record per episode (last-k history needs this)"}
	demosTourFlag    = &cli.StringFlag{Name: "tour", Usage: "explore demos' room search order: doors (task-named rooms, then doors as discovered), random (seeded; only a memory of the tour predicts it: for --read-records that must be read) or random-direct (random; a room the task names is reached by one teleport once the work has begun) (tour)", Value: string(demos.TourDoors)}
	demosKindFlag    = &cli.StringFlag{Name: "kind", Usage: "gold (the environment's gold actions) or explore (gold work, observable room search instead of its moves; needs the teleport simplification, e.g. --simplifications easy)", Value: string(demos.KindGold)}
	demosNoTipsFlag  = &cli.BoolFlag{Name: "no-tips", Usage: "leave out the tip-writing turn after each episode"}
	demosHeldFlag    = &cli.BoolFlag{Name: "held-out", Usage: "with no --tasks, also include held-out tasks"}
	demosSeedFlag    = &cli.Int64Flag{Name: "seed", Usage: "reset seed", Value: 0}
	demosTextFlag    = &cli.StringFlag{Name: "text", Usage: "also write every message's text to `FILE` (a corpus for `empo2 model init --corpus`, so a generated tokenizer fits the environment)"}
	demosTipRecFlag  = &cli.IntFlag{Name: "tip-records", Usage: "per episode, also write `N` one-step records whose prompts carry tips retrieved (hash embedder) from a memory of the demo and of failed attempts at its variation (docs/sft.md)"}
	demosTipFailFlag = &cli.IntFlag{Name: "tip-failures", Usage: "failed attempts played per episode for --tip-records", Value: demos.DefaultTipRecordConfig().Failures}
	demosFailTipFlag = &cli.BoolFlag{Name: "failure-tips", Usage: "with --tip-records, also write each failed attempt's tip-writing turn (so the model learns to write tips after failures too)"}
	demosThreshFlag  = &cli.Float64Flag{Name: "threshold", Usage: "retrieval cosine threshold of --tip-records (memory.threshold)", Value: demos.DefaultTipRecordConfig().Threshold}
	demosTipsInFlag  = &cli.StringFlag{Name: "tips-in", Usage: "where --tip-records prompts keep their tips (memory.tips_in): every-turn or last-turn", Value: string(demos.DefaultTipRecordConfig().TipsIn)}
	demosTopKFlag    = &cli.IntFlag{Name: "top-k", Usage: "tips per prompt of --tip-records (memory.top_k)", Value: demos.DefaultTipRecordConfig().TopK}
	demosAttemptFlag = &cli.IntFlag{Name: "attempt-tips", Usage: "per episode, also write `N` tip-writing records after attempts that go astray (the demo's first actions, then random ones to the step limit), each answered with its true tip (docs/memory.md)"}
	demosReadFlag    = &cli.IntFlag{Name: "read-records", Usage: "per episode, also write `N` memory-reading records: a step's prompt with the memory block the rollout would show (from the demo and attempts deviating from it; --key, --threshold, --top-k, --tips-in), answered with the demo's action (docs/sft.md)"}
	demosReadMemFlag = &cli.StringFlag{Name: "read-memory", Usage: "with --read-records: retrieve the blocks from this tips memory `FILE` (read-only; e.g. a memory-only run's memory.db on the demos' variations: the policy's own attempts and tips) instead of a memory of the demo and attempts deviating from it"}
	demosShortFlag   = &cli.BoolFlag{Name: "read-short", Usage: "with --read-records: each record keeps only the task's first turn and its own turn with the block, the turns between dropped (a record at the first step is left out) (read_short)"}
	demosTrialsFlag  = &cli.IntFlag{Name: "read-trials", Usage: "with --read-records: each record's block comes from a memory of its own holding at most `N` episodes (the demo, or an attempt deviating at the record's step, and with N ≥ 2 sometimes one more), as an adaptation trial's memory holds the trials before it (0: one memory of the demo and all its attempts)"}
	demosWrongFlag   = &cli.Float64Flag{Name: "read-wrong-tips", Usage: "with --read-records: the probability `P` that a stored episode shows another episode's tip instead of its own (only the code-written action and score then say what to do) (read_wrong_tips)"}
	demosKeyFlag     = &cli.StringFlag{Name: "key", Usage: "retrieval key of --tip-records and --read-records (memory.key): conversation or observation", Value: string(demos.DefaultTipRecordConfig().Key)}

	promptHistoryFlag = &cli.StringFlag{Name: "history", Usage: "prompt history: full or last-k", Value: string(rollout.HistoryFull)}
	promptKFlag       = &cli.IntFlag{Name: "history-k", Usage: "turns kept with --history last-k", Value: rollout.DefaultPromptConfig().HistoryK}
	promptFormatFlag  = &cli.StringFlag{Name: "action-format", Usage: "naive (one action line) or cot (<action>…</action>)", Value: string(rollout.FormatNaive)}
	promptSystemFlag  = &cli.StringFlag{Name: "system", Usage: "system `TEXT` (default: the trainer's)"}
)

// demosShortcuts are the flags of `env demos` and the keys of
// demos.RunConfig they set (ENV, the argument, sets env).
var demosShortcuts = []shortcut{
	{demosTasksFlag, "tasks"}, {demosSplitFlag, "split"}, {demosVarsFlag, "variations"}, {demosSkipFlag, "skip_variations"},
	{demosOutFlag, "out"}, {demosPerStepFlag, "per_step"}, {demosKindFlag, "kind"}, {demosTourFlag, "tour"}, {demosNoTipsFlag, "no_tips"},
	{demosHeldFlag, "held_out"}, {demosSeedFlag, "seed"}, {demosTextFlag, "text"}, {demosTipRecFlag, "tip_records"},
	{demosTipFailFlag, "tip_failures"}, {demosFailTipFlag, "failure_tips"}, {demosThreshFlag, "threshold"},
	{demosTipsInFlag, "tips_in"}, {demosTopKFlag, "top_k"}, {demosAttemptFlag, "attempt_tips"},
	{demosReadFlag, "read_records"}, {demosReadMemFlag, "read_memory"}, {demosTrialsFlag, "read_trials"}, {demosShortFlag, "read_short"},
	{demosWrongFlag, "read_wrong_tips"}, {demosKeyFlag, "key"},
	{promptHistoryFlag, "prompt.history"}, {promptKFlag, "prompt.history_k"}, {promptFormatFlag, "prompt.action_format"},
	{promptSystemFlag, "prompt.system"},
	{envDataFlag, "env_options.data_dir"}, {envJarFlag, "env_options.jar"}, {envSimpFlag, "env_options.simplifications"},
	{envLimitFlag, "env_options.step_limit"},
}

// envDemosCommand is the `env demos` subcommand (listed in env.go).
func envDemosCommand() *cli.Command {
	return &cli.Command{
		Name:      "demos",
		Usage:     "write gold (or exploring) demonstrations as chat JSONL in the trainer's prompt format, for `empo2 sft`",
		ArgsUsage: "ENV",
		Description: "Each episode is played through the environment and written in exactly the prompt format of\n" +
			"the rollouts (system text, task, history, action format), followed by a tip-writing turn.\n" +
			"Only episodes that end done with a positive score are written. Every key (docs/sft.md) can come\n" +
			"from --config FILE and --set KEY=VALUE; the flags are shortcuts. See docs/sft.md.",
		Flags: append(append(configFlags("demos"), demosTasksFlag, demosSplitFlag, demosVarsFlag, demosSkipFlag, demosOutFlag, demosPerStepFlag, demosKindFlag, demosTourFlag,
			demosNoTipsFlag, demosHeldFlag, demosSeedFlag, demosTextFlag, demosTipRecFlag, demosTipFailFlag, demosFailTipFlag, demosThreshFlag, demosTopKFlag, demosTipsInFlag, demosAttemptFlag,
			demosReadFlag, demosReadMemFlag, demosTrialsFlag, demosShortFlag, demosWrongFlag, demosKeyFlag, promptHistoryFlag, promptKFlag, promptFormatFlag, promptSystemFlag, forceFlag), envOptionFlags()...),
		Action: envDemos,
	}
}

// demosConfig resolves env demos' configuration: defaults, --config,
// --set, ENV and the shortcut flags, then --correct-actions and --env-opt.
func demosConfig(c *cli.Context) (demos.RunConfig, error) {
	sets := overrides(c, demosShortcuts)
	if c.NArg() == 1 {
		sets = append(sets, "env="+strconv.Quote(c.Args().First()))
	}
	cfg, err := demos.LoadRunConfig(configFile(c), sets)
	if err != nil {
		return cfg, err
	}
	if cfg.Env == "" {
		return cfg, nil // Run names what is missing
	}
	return cfg, applyEnvExtras(c, cfg.Env, &cfg.EnvOptions)
}

func envDemos(c *cli.Context) error {
	if c.NArg() > 1 || (c.NArg() == 0 && configFile(c) == "") {
		return fmt.Errorf("want ENV, got %d arguments (environments: %s)", c.NArg(), strings.Join(environments.Names(), ", "))
	}
	cfg, err := demosConfig(c)
	if err != nil {
		return err
	}
	if printConfig(c) {
		return demos.PrintRunConfig(c.App.Writer, cfg)
	}
	cfg.Warn = func(msg string) { log.Warn().Msg(msg) }
	cfg.ConfigFile, cfg.Force = configFile(c), c.Bool(forceFlag.Name)
	ctx, sig := interruptible(c)
	defer sig.stop()
	pl := newProgressLine("") // the bar's line: variations played, ETA (internal/watch)
	ctx = pl.attach(ctx)
	cfg.Plan = func(tasks, variations int) {
		log.Info().Int("variations", variations).Int("tasks", tasks).Str("out", cfg.Out).Msg("env demos: playing")
		pl.phase(watch.Demos, variations)
	}
	res, err := demos.Run(ctx, cfg)
	pl.finish(err == nil)
	if err != nil {
		if sig.caught() {
			return sig.interrupted(fmt.Sprintf("env demos interrupted after %d episodes; %s not written", res.Episodes, cfg.Out))
		}
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s: %d episodes, %d steps, %d records (%d with retrieved tips, %d failed-attempt tip turns; %s demos, %s split, history %s); %d skipped\n",
		cfg.Out, res.Episodes, res.Steps, res.Records, res.TipRecords, res.FailTips, res.Kind, res.Split, res.History, res.Skipped)
	if res.AttemptTips > 0 {
		fmt.Fprintf(c.App.Writer, "  %d of the records are tip turns after astray attempts (--attempt-tips)\n", res.AttemptTips)
	}
	if res.ReadRecords > 0 {
		fmt.Fprintf(c.App.Writer, "  %d of the records are memory-reading records (--read-records)\n", res.ReadRecords)
	}
	return nil
}

// splitList flattens comma-separated values.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}
