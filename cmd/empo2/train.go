package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/trainer"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/presets"
)

var (
	trainConfigFlag = &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "run configuration YAML `FILE` (optional: a preset and flags suffice)"}
	trainPresetFlag = &cli.StringFlag{Name: "preset", Usage: "preset: " + strings.Join(presets.Names(), " | ") + " (default: the config's preset key, else empo2)"}
	trainRunDirFlag = &cli.StringFlag{Name: "run-dir", Usage: "run `DIR`: config.yaml, memory.db, metrics.jsonl, eval.jsonl, checkpoints/"}
	trainResumeFlag = &cli.BoolFlag{Name: "resume", Usage: "continue the run in --run-dir from its latest checkpoint (its config.yaml; --steps and --set may change it)"}
	trainModelFlag  = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "base model GGUF `FILE` (model:)"}
	trainEnvFlag    = &cli.StringFlag{Name: "env", Usage: "environment: textlab | webshop | scienceworld (env:)"}
	trainTasksFlag  = &cli.StringSliceFlag{Name: "tasks", Usage: "task `NAMES`, comma-separated or repeated; task/N = one variation (tasks:)"}
	trainStepsFlag  = &cli.IntFlag{Name: "steps", Usage: "training steps (steps:)"}
	trainSeedFlag   = &cli.Int64Flag{Name: "seed", Usage: "run seed (seed:)"}
	trainSetFlag    = &cli.StringSliceFlag{Name: "set", Usage: "override one key, `KEY=VALUE` (YAML value; repeatable), e.g. --set update.lr=5e-5"}
	trainPrintFlag  = &cli.BoolFlag{Name: "print-config", Usage: "print the resolved configuration, every key documented, and exit"}
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
		Flags: []cli.Flag{trainConfigFlag, trainPresetFlag, trainRunDirFlag, trainResumeFlag, trainModelFlag, trainEnvFlag,
			trainTasksFlag, trainStepsFlag, trainSeedFlag, llmThreadsFlag, trainSetFlag, trainPrintFlag},
		Action: trainAction,
	})
}

// trainSets turns the common flags into --set overrides (applied after
// the explicit ones, so a flag wins).
func trainSets(c *cli.Context) []string {
	sets := append([]string(nil), c.StringSlice(trainSetFlag.Name)...)
	if c.IsSet(trainModelFlag.Name) {
		sets = append(sets, "model="+strconv.Quote(c.String(trainModelFlag.Name)))
	}
	if c.IsSet(trainEnvFlag.Name) {
		sets = append(sets, "env="+strconv.Quote(c.String(trainEnvFlag.Name)))
	}
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
		if c.IsSet(trainConfigFlag.Name) || c.IsSet(trainPresetFlag.Name) {
			return errors.New("--resume uses the run's own config.yaml: drop --config and --preset (change keys with --set)")
		}
		old, err := trainer.LoadRunConfig(dir, nil)
		if err != nil {
			return err
		}
		if cfg, err = trainer.LoadRunConfig(dir, trainSets(c)); err != nil {
			return err
		}
		if cfg.Model != old.Model || cfg.Env != old.Env || cfg.Seed != old.Seed || !slices.Equal(cfg.Tasks, old.Tasks) || cfg.LoRA.Rank != old.LoRA.Rank {
			return fmt.Errorf("--resume cannot change the run's model, env, tasks, seed or LoRA rank (see %s/config.yaml)", dir)
		}
	} else if cfg, err = trainer.LoadConfig(c.String(trainConfigFlag.Name), c.String(trainPresetFlag.Name), trainSets(c)); err != nil {
		return err
	}
	if c.Bool(trainPrintFlag.Name) {
		return trainer.PrintConfig(c.App.Writer, cfg)
	}
	if dir == "" {
		return errors.New("--run-dir is required (or --print-config)")
	}
	if cfg.Model == "" {
		return errors.New("no model: give -m FILE (or model: in --config)")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	// SIGINT/SIGTERM finish or abandon the step, checkpoint and exit 0: a
	// checkpoint being written must complete, not lose its files.
	gguf.SetSignalCleanup(false)
	defer gguf.SetSignalCleanup(true)
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var bar *progressbar.ProgressBar
	opts := trainer.RunOptions{Dir: dir, Config: cfg, Resume: resume}
	opts.OnStart = func(first, last int) {
		log.Info().Str("run_dir", dir).Str("preset", cfg.Preset).Str("env", cfg.Env).Int("first_step", first).Int("steps", last).
			Int("batch", cfg.Batch.Tasks*cfg.Batch.Rollouts).Msg("train")
		if term.IsTerminal(int(os.Stderr.Fd())) && last >= first {
			bar = progressbar.NewOptions(last-first+1, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("train"),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionClearOnFinish())
		}
	}
	opts.OnEngine = func(p trainer.EnginePlan) {
		log.Info().Bool("transpose_in_graph", p.InGraph).Int64("stored_transpose_bytes", p.Stored).Int64("weights_bytes", p.Weights).
			Int64("available_bytes", p.Available.Bytes).Int64("compute_budget_bytes", p.Budget).Msg("engine: " + p.Reason)
	}
	opts.OnStep = func(m trainer.StepMetrics) {
		if bar != nil {
			bar.Describe(fmt.Sprintf("step %d/%d %s score %.1f succ %.2f loss %.4f", m.Step, cfg.Steps, m.Mode, m.ScoreMean, m.SuccessRate, m.Loss))
			_ = bar.Add(1)
			return
		}
		log.Info().Int("step", m.Step).Int("steps", cfg.Steps).Str("mode", string(m.Mode)).Float64("score", m.ScoreMean).
			Float64("success", m.SuccessRate).Float64("reward", m.RewardMean).Float64("loss", m.Loss).Float64("kl", m.ApproxKL).
			Float64("clip", m.ClipFrac).Int("tips_written", m.TipsWritten).Float64("t_step", m.TStep).Msg("step")
	}
	opts.OnEval = func(l evaluate.Line) {
		log.Info().Int("step", l.Step).RawJSON("memory_off", orNull(l.MemoryOff)).RawJSON("memory_on", orNull(l.MemoryOn)).Msg("eval")
	}
	res, err := trainer.Train(ctx, opts)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Warn().Msg("interrupted")
			return nil
		}
		return err
	}
	if res.Interrupted {
		log.Warn().Int("last_step", res.LastStep).Str("checkpoint", res.Checkpoint).
			Msg("interrupted: checkpointed; continue with empo2 train --run-dir " + dir + " --resume")
		return nil
	}
	fmt.Fprintf(c.App.Writer, "trained steps %d..%d; run directory %s; checkpoint %s\n", res.FirstStep, res.LastStep, dir, res.Checkpoint)
	return nil
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}
