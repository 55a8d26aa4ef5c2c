package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/runfiles"
	"github.com/empo2/empo2/trainer"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/presets"
	"github.com/empo2/empo2/trainer/rollout"
)

var (
	trainPresetFlag = &cli.StringFlag{Name: "preset", Usage: "preset: " + strings.Join(presets.Names(), " | ") + " (default: the config's preset key, else empo2)"}
	trainRunDirFlag = &cli.StringFlag{Name: "run-dir", Usage: "run `DIR`: config.yaml, memory.db, metrics.jsonl, eval.jsonl, checkpoints/ (a new run needs a missing or empty DIR)"}
	trainResumeFlag = &cli.BoolFlag{Name: "resume", Usage: "continue the run in --run-dir from its latest checkpoint (its config.yaml; --steps and --set may change it)"}
	trainModelFlag  = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "base model GGUF `FILE` (model:)"}
	trainEnvFlag    = &cli.StringFlag{Name: "env", Usage: "environment: textlab | webshop | scienceworld (env:)"}
	trainTasksFlag  = &cli.StringSliceFlag{Name: "tasks", Usage: "task `NAMES`, comma-separated or repeated; task/N = one variation (tasks:)"}
	trainStepsFlag  = &cli.IntFlag{Name: "steps", Usage: "training steps (steps:)"}
	trainSeedFlag   = &cli.Int64Flag{Name: "seed", Usage: "run seed (seed:)"}
)

func init() {
	register(&cli.Command{
		Name:      "train",
		Usage:     "train an agent with EMPO² (memory rollouts, tips, off-policy updates), GRPO or memory only",
		ArgsUsage: " ",
		Description: "Each step samples batch.tasks task variations × batch.rollouts episodes, plays them together\n" +
			"(one batched llama.cpp decode per turn, each episode its own KV sequence), writes tips, builds\n" +
			"GRPO samples and updates the LoRA adapter in place. See docs/train.md.\n\n" +
			"Examples:\n" +
			"   empo2 train --preset empo2 -m tiny.gguf --env textlab --run-dir r --steps 3\n" +
			"   empo2 train --preset grpo -m tiny.gguf --env textlab --tasks melt,boil --run-dir g --set batch.rollouts=8\n" +
			"   empo2 train --run-dir r --resume --steps 10\n" +
			"   empo2 train --preset memory-only --print-config",
		Flags: append([]cli.Flag{trainPresetFlag, trainRunDirFlag, trainResumeFlag, trainModelFlag, trainEnvFlag,
			trainTasksFlag, trainStepsFlag, trainSeedFlag, llmThreadsFlag, envJarFlag, envDataFlag}, configFlags("run")...),
		Action: trainAction,
	})
}

// trainSets turns the common flags into --set overrides (applied after
// the explicit ones, so a flag wins).
func trainSets(c *cli.Context) []string {
	sets := configSets(c)
	str := func(f *cli.StringFlag, key string) {
		if c.IsSet(f.Name) {
			sets = append(sets, key+"="+strconv.Quote(c.String(f.Name)))
		}
	}
	str(trainModelFlag, "model")
	str(trainEnvFlag, "env")
	str(envJarFlag, "env_options.jar")
	str(envDataFlag, "env_options.data_dir")
	if c.IsSet(trainTasksFlag.Name) {
		var ts []string
		for _, t := range c.StringSlice(trainTasksFlag.Name) {
			for _, p := range strings.Split(t, ",") {
				if p = strings.TrimSpace(p); p != "" {
					ts = append(ts, strconv.Quote(p))
				}
			}
		}
		sets = append(sets, "tasks=["+strings.Join(ts, ", ")+"]")
	}
	if c.IsSet(trainStepsFlag.Name) {
		sets = append(sets, "steps="+strconv.Itoa(c.Int(trainStepsFlag.Name)))
	}
	if c.IsSet(trainSeedFlag.Name) {
		sets = append(sets, "seed="+strconv.FormatInt(c.Int64(trainSeedFlag.Name), 10))
	}
	if c.IsSet(llmThreadsFlag.Name) {
		sets = append(sets, "threads="+strconv.Itoa(c.Int(llmThreadsFlag.Name)))
	}
	return sets
}

func trainAction(c *cli.Context) error {
	if err := checkThreads(c); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return fmt.Errorf("train takes no arguments (got %q); see empo2 train --help", c.Args().Slice())
	}
	dir := c.String(trainRunDirFlag.Name)
	resume := c.Bool(trainResumeFlag.Name)
	var cfg trainer.Config
	var err error
	if resume {
		if dir == "" {
			return errors.New("--resume needs --run-dir")
		}
		if c.IsSet(configFlagName) || c.IsSet(trainPresetFlag.Name) {
			return errors.New("--resume uses the run's own config.yaml: drop --config and --preset (change keys with --set)")
		}
		// trainer.Train checks what a resume may not change
		if cfg, err = trainer.LoadRunConfig(dir, trainSets(c)); err != nil {
			return err
		}
	} else if cfg, err = trainer.LoadConfig(configFile(c), c.String(trainPresetFlag.Name), trainSets(c)); err != nil {
		return err
	}
	if printConfig(c) {
		return trainer.PrintConfig(c.App.Writer, cfg)
	}
	if dir == "" {
		return errors.New("--run-dir is required (or --print-config)")
	}
	if cfg.Model == "" {
		return errors.New("no model: give -m FILE (or model: in --config)")
	}
	if cfg.Steps == 0 {
		return errors.New("steps 0: nothing to train; give --steps N (N ≥ 1), or use --print-config to see the configuration without training")
	}
	// SIGINT/SIGTERM finish or abandon the step, checkpoint and exit 0: a
	// checkpoint being written must complete, not lose its files.
	safefile.SetSignalCleanup(false)
	defer safefile.SetSignalCleanup(true)
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// progress inside a step: the bar's line on a terminal, a log line per phase otherwise, progress.json
	pl := newProgressLine(dir)
	ctx = pl.attach(ctx)

	var bar *progressbar.ProgressBar
	updates := 0
	opts := trainer.RunOptions{Dir: dir, Config: cfg, Resume: resume}
	opts.OnStart = func(first, last int) {
		log.Info().Str("run_dir", dir).Str("preset", cfg.Preset).Str("env", cfg.Env).Int("first_step", first).Int("steps", last).
			Int("batch", cfg.Batch.Tasks*cfg.Batch.Rollouts).Msg("train")
		bar = pl.newBar(int64(last-first+1), "train")
	}
	contextWarned := false
	opts.OnEngine = func(p trainer.EnginePlan) {
		log.Info().Bool("transpose_in_graph", p.InGraph).Int64("stored_transpose_bytes", p.Stored).Int64("weights_bytes", p.Weights).
			Int64("available_bytes", p.Available.Bytes).Int64("compute_budget_bytes", p.Budget).Msg("engine: " + p.Reason)
	}
	opts.OnStep = func(m trainer.StepMetrics) {
		updates += m.Updates
		if why := trainer.NoUpdateReason(m, cfg); why != "" {
			log.Warn().Int("step", m.Step).Msg(why)
		}
		if w := rollout.ContextWarning(m.EndReasons, m.Context); w != "" && !contextWarned {
			contextWarned = true // once a run: metrics.jsonl's end_reasons has every step's counts
			log.Warn().Int("step", m.Step).Msg(w)
		}
		if bar != nil {
			pl.setSuffix(fmt.Sprintf("step %d: %s score %.1f succ %.2f loss %.4f updates %d", m.Step, m.Mode, m.ScoreMean, m.SuccessRate, m.Loss, updates))
			_ = bar.Add(1)
			return
		}
		log.Info().Int("step", m.Step).Int("steps", cfg.Steps).Str("mode", m.Mode).Float64("score", m.ScoreMean).
			Float64("success", m.SuccessRate).Float64("reward", m.RewardMean).Float64("loss", m.Loss).Float64("kl", m.ApproxKL).
			Float64("clip", m.ClipFrac).Int("updates", m.Updates).Int("zero_var_groups", m.ZeroVarGroups).Int("tips_written", m.TipsWritten).
			Float64("t_step", m.TStep).Any("end_reasons", m.EndReasons).Msg("step")
	}
	opts.OnEval = func(l evaluate.Line) {
		log.Info().Int("step", l.Step).RawJSON("memory_off", jsonOrNull(l.MemoryOff)).RawJSON("memory_on", jsonOrNull(l.MemoryOn)).Msg("eval")
	}
	res, err := trainer.Train(ctx, opts)
	pl.finish(err == nil && !res.Interrupted)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Warn().Msg("interrupted")
			return nil
		}
		return err
	}
	if res.Interrupted && res.Checkpoint == "" {
		log.Warn().Int("last_step", res.LastStep).
			Msg(fmt.Sprintf("interrupted during step %d: nothing was checkpointed yet (no step had completed); start again with empo2 train --run-dir %s --resume (it begins at step %d)",
				res.LastStep+1, dir, res.LastStep+1))
		return nil
	}
	if res.Interrupted {
		log.Warn().Int("last_step", res.LastStep).Str("checkpoint", res.Checkpoint).
			Msg("interrupted: checkpointed; continue with empo2 train --run-dir " + dir + " --resume")
		return nil
	}
	if res.LastStep < res.FirstStep {
		fmt.Fprintf(c.App.Writer, "nothing to train: the run in %s has already trained its %d steps (checkpoint %s); to train on, resume with more steps: empo2 train --run-dir %s --resume --steps N (N > %d)\n",
			dir, res.LastStep, res.Checkpoint, dir, res.LastStep)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "trained steps %d..%d with %d updates; run directory %s; checkpoint %s\n", res.FirstStep, res.LastStep, res.Updates, dir, res.Checkpoint)
	if why := nothingLearned(cfg, res); why != "" {
		fmt.Fprintln(c.App.Writer, why)
	}
	return nil
}

// nothingLearned explains a run that made no update ("" when it made some,
// ran no step, or is not meant to update).
func nothingLearned(cfg trainer.Config, res trainer.RunResult) string {
	if res.Updates > 0 || res.LastStep < res.FirstStep || !cfg.Mode.Update {
		return ""
	}
	if res.ZeroVarGroups == res.Groups {
		return fmt.Sprintf("0 updates: in all %d groups every episode had equal scores (zero variance), so every GRPO advantage was 0 and there was nothing to learn.\n"+
			"A policy that never scores cannot improve by reinforcement alone: warm-start it with `empo2 sft` (docs/sft.md; then lora.init or an SFT'd model),\n"+
			"or give each group more episodes (--set batch.rollouts=8) so that some score differently.", res.Groups)
	}
	return "0 updates: every training response was masked (update.low_prob_threshold and update.low_prob_mask decide which) or no sample was built; see metrics.jsonl (masked_seqs, zero_var_groups)."
}

// jsonOrNull is v's JSON, or null for a nil pointer.
func jsonOrNull(v *runfiles.EvalResult) []byte {
	if v == nil {
		return []byte("null")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return b
}
