package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/trainer"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

// Flags of `empo2 eval`: shortcuts for keys of evaluate.RunConfig
// (docs/eval.md); the defaults are the configuration's.
var (
	evalDef           = evaluate.DefaultRunConfig()
	evalModelFlag     = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "policy model GGUF `FILE` (model; default with --run: the run's model)"}
	evalLoraFlag      = &cli.StringFlag{Name: "lora", Usage: "LoRA adapter GGUF `FILE` to evaluate (lora)"}
	evalRunFlag       = &cli.StringFlag{Name: "run", Usage: "training run `DIR` (run): its model, environment, tasks, settings, memory and checkpoint adapter"}
	evalCkptFlag      = &cli.StringFlag{Name: "checkpoint", Usage: "checkpoint of --run: latest, base (no adapter) or a step `N` (checkpoint)", DefaultText: evalDef.Checkpoint}
	evalEnvFlag       = &cli.StringFlag{Name: "env", Usage: "environment `NAME` (env; default: the run's, else " + evalDef.Env + ")"}
	evalTasksFlag     = &cli.StringSliceFlag{Name: "tasks", Usage: "task `NAMES` (tasks; comma-separated or repeated; default: the run's, else every task not held out, with --ood the held-out ones)"}
	evalSplitFlag     = &cli.StringFlag{Name: "split", Usage: "variation split: train, dev or test (eval.split)", DefaultText: string(evalDef.Eval.Split)}
	evalMemoryFlag    = &cli.StringFlag{Name: "memory", Usage: "memory setting: off, on or both (eval.memory)", DefaultText: string(evalDef.Eval.Memory)}
	evalMemoryDBFlag  = &cli.StringFlag{Name: "memory-db", Usage: "tips memory `FILE` for --memory on|both (memory_db; default with --run: the run's memory.db, read-only)"}
	evalWriteTipsFlag = &cli.BoolFlag{Name: "write-tips", Usage: "memory-on episodes write tips into the memory (write_tips; eval never changes it otherwise)"}
	evalEpisodesFlag  = &cli.IntFlag{Name: "episodes", Usage: "episodes per task variation (eval.episodes)", DefaultText: strconv.Itoa(evalDef.Eval.Episodes)}
	evalVarsFlag      = &cli.IntFlag{Name: "variations", Usage: "evaluate the first `N` variations of the split per task, 0: all (eval.max_variations)", DefaultText: strconv.Itoa(evalDef.Eval.MaxVariations)}
	evalTempFlag      = &cli.Float64Flag{Name: "temperature", Aliases: []string{"t"}, Usage: "sampling temperature, 0: greedy (eval.temperature)", DefaultText: yamlFloat(evalDef.Eval.Temperature)}
	evalSeedFlag      = &cli.Int64Flag{Name: "seed", Usage: "seed of the episodes' sampling (seed)", DefaultText: strconv.FormatInt(evalDef.Seed, 10)}
	evalJSONFlag      = &cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object instead of a table"}
	evalOutFlag       = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "also write the JSON result to `FILE` (out)"}
	evalEpisodesOut   = &cli.StringFlag{Name: "episodes-out", Usage: "also write every episode played to `FILE`, one JSON object per line: setting, trial, score, end, and per step the tip block shown, the response, the action and the observation (episodes_out)"}
	evalOODFlag       = &cli.BoolFlag{Name: "ood", Usage: "out-of-distribution adaptation (ood): --trials consecutive trials per held-out variation with a fresh memory, and the same without memory"}
	evalTrialsFlag    = &cli.IntFlag{Name: "trials", Usage: "trials per variation with --ood (trials)", DefaultText: strconv.Itoa(evalDef.Trials)}
	evalParallelFlag  = &cli.IntFlag{Name: "parallel", Usage: "episodes decoded together, KV sequences (parallel)", DefaultText: strconv.Itoa(evalDef.Parallel)}
	evalCtxFlag       = &cli.IntFlag{Name: "ctx", Usage: "tokens per episode, prompt + action; may exceed the model's training context, RoPE (context; default: the run's, else " + strconv.Itoa(evalDef.Context) + ")"}
	evalGPULayersFlag = &cli.IntFlag{Name: "gpu-layers", Usage: "layers to offload to a GPU backend, -1: all (gpu_layers)"}
	evalActionTokFlag = &cli.IntFlag{Name: "max-action-tokens", Usage: "generation limit per action (rollout.max_action_tokens; default: the run's, else " + strconv.Itoa(evalDef.Rollout.Prompt.MaxActionTokens) + ")"}
	evalHistoryFlag   = &cli.StringFlag{Name: "history", Usage: "history in the prompt: full or last-k (rollout.history; default: the run's, else " + string(evalDef.Rollout.Prompt.History) + ")"}
	evalHistoryKFlag  = &cli.IntFlag{Name: "history-k", Usage: "turns kept with --history last-k (rollout.history_k)"}
	evalFormatFlag    = &cli.StringFlag{Name: "action-format", Usage: "naive or cot (rollout.action_format; default: the run's, else " + string(evalDef.Rollout.Prompt.ActionFormat) + ")"}
	evalEmbedderFlag  = &cli.StringFlag{Name: "embedder", Usage: "retrieval embedder: hash, policy or a GGUF `FILE` (memory.embedder; default: the run's, else " + evalDef.Memory.Embedder + ")"}
	evalThresholdFlag = &cli.Float64Flag{Name: "threshold", Usage: "retrieval cosine threshold (memory.threshold; default: the run's, else " + yamlFloat(evalDef.Memory.Threshold) + ")"}
	evalTopKFlag      = &cli.IntFlag{Name: "top-k", Usage: "tips per prompt (memory.top_k; default: the run's, else " + strconv.Itoa(evalDef.Memory.TopK) + ")"}
	evalTipTempFlag   = &cli.Float64Flag{Name: "tip-temperature", Usage: "sampling temperature of written tips (--ood, --write-tips); < 0: --temperature (rollout.tip_temperature; default: the run's, else " + yamlFloat(evalDef.Rollout.TipTemperature) + ")"}
	evalSuccessFlag   = &cli.Float64Flag{Name: "success-score", Usage: "an episode succeeds when its final score reaches this, 0: the environment's: 71 on scienceworld (the EMPO² recipe's score above 70), 100 elsewhere (rollout.success_score; default: the run's, else " + yamlFloat(evalDef.Rollout.SuccessScore) + ")"}
)

// evalShortcuts are the flags of `eval` and the keys they set.
var evalShortcuts = []shortcut{
	{evalModelFlag, "model"}, {evalLoraFlag, "lora"}, {evalRunFlag, "run"}, {evalCkptFlag, "checkpoint"}, {evalEnvFlag, "env"},
	{evalTasksFlag, "tasks"}, {evalSplitFlag, "eval.split"}, {evalMemoryFlag, "eval.memory"}, {evalMemoryDBFlag, "memory_db"},
	{evalWriteTipsFlag, "write_tips"}, {evalEpisodesFlag, "eval.episodes"}, {evalVarsFlag, "eval.max_variations"},
	{evalTempFlag, "eval.temperature"}, {evalSeedFlag, "seed"}, {evalOutFlag, "out"}, {evalEpisodesOut, "episodes_out"}, {evalOODFlag, "ood"}, {evalTrialsFlag, "trials"},
	{evalParallelFlag, "parallel"}, {llmThreadsFlag, "threads"}, {evalCtxFlag, "context"}, {evalGPULayersFlag, "gpu_layers"},
	{evalActionTokFlag, "rollout.max_action_tokens"}, {evalHistoryFlag, "rollout.history"}, {evalHistoryKFlag, "rollout.history_k"},
	{evalFormatFlag, "rollout.action_format"}, {evalEmbedderFlag, "memory.embedder"}, {evalThresholdFlag, "memory.threshold"},
	{evalTopKFlag, "memory.top_k"}, {evalTipTempFlag, "rollout.tip_temperature"}, {evalSuccessFlag, "rollout.success_score"},
	{envDataFlag, "env_options.data_dir"}, {envJarFlag, "env_options.jar"}, {envSimpFlag, "env_options.simplifications"},
	{envLimitFlag, "env_options.step_limit"},
}

func init() {
	register(&cli.Command{
		Name:  "eval",
		Usage: "evaluate a policy with and without memory, or its adaptation to held-out tasks (--ood)",
		Description: "Plays eval.episodes episodes per task variation of eval.split with the rollout engine of training\n" +
			"(batched, each episode its own KV sequence) at eval.temperature, with memory off, on or both (same\n" +
			"seeds), and prints a per-task table and the overall mean score and success rate. With --run DIR\n" +
			"the run's model, environment, tasks, context, rollout and memory settings, memory (read-only) and\n" +
			"checkpoint adapter are the defaults, and the result is also written to DIR/eval/.\n" +
			"--ood runs --trials consecutive trials per held-out variation, writing a tip after each trial into\n" +
			"a fresh memory (no weight updates), and the same trials without memory as the control.\n" +
			"The plan (tasks × variations × episodes × settings) is logged before the first episode.\n" +
			"Every key (docs/eval.md) can come from --config FILE and --set KEY=VALUE; the flags are shortcuts.\n" +
			"Examples:\n" +
			"  empo2 eval --model tiny.gguf --env textlab --tasks melt --variations 2 --memory both --memory-db mem.db --json\n" +
			"  empo2 eval --run runs/a --split dev --memory both --episodes 2\n" +
			"  empo2 eval --model tiny.gguf --lora adapter.gguf --ood --trials 3 --variations 2\n" +
			"  empo2 eval --run runs/a --print-config",
		Flags: append(append(configFlags("eval"), evalModelFlag, evalLoraFlag, evalRunFlag, evalCkptFlag, evalEnvFlag,
			evalTasksFlag, evalSplitFlag, evalMemoryFlag, evalMemoryDBFlag, evalWriteTipsFlag, evalEpisodesFlag, evalVarsFlag, evalTempFlag,
			evalSeedFlag, evalJSONFlag, evalOutFlag, evalEpisodesOut, evalOODFlag, evalTrialsFlag, evalParallelFlag, llmThreadsFlag, evalCtxFlag,
			evalGPULayersFlag, evalActionTokFlag, evalHistoryFlag, evalHistoryKFlag, evalFormatFlag, evalEmbedderFlag, evalThresholdFlag,
			evalTopKFlag, evalTipTempFlag, evalSuccessFlag, forceFlag), envOptionFlags()...),
		Action: evalAction,
	})
}

// evalConfig resolves eval's configuration: defaults (a run's settings
// with run), --config, --set, the shortcut flags, then --correct-actions
// and --env-opt.
func evalConfig(c *cli.Context) (evaluate.RunConfig, error) {
	cfg, err := trainer.LoadEvalConfig(configFile(c), overrides(c, evalShortcuts))
	if err != nil {
		return cfg, err
	}
	cfg.ConfigFile, cfg.Force = configFile(c), c.Bool(forceFlag.Name)
	return cfg, applyEnvExtras(c, cfg.Env, &cfg.EnvOptions)
}

func evalAction(c *cli.Context) error {
	if err := checkThreads(c); err != nil {
		return err
	}
	if c.Args().Len() > 0 {
		return fmt.Errorf("eval: unexpected argument %q", c.Args().First())
	}
	cfg, err := evalConfig(c)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if printConfig(c) {
		return evaluate.PrintRunConfig(c.App.Writer, cfg)
	}
	ctx, sig := interruptible(c)
	defer sig.stop()
	pl := newProgressLine("") // the bar's line: episodes, tokens/s, ETA (internal/watch)
	ctx = pl.attach(ctx)
	bar := &evalBar{last: time.Now(), start: time.Now(), parallel: cfg.Parallel}
	cfg.Progress = bar.update
	cfg.Plan = func(p evaluate.Plan) {
		bar.total = p.Total
		pl.phase(watch.Eval, p.Total)
		log.Info().Msg("eval plan: " + p.String())
	}
	cfg.Warn = func(msg string) { log.Warn().Msg(msg) }
	start := time.Now()
	res, err := evaluate.Run(ctx, cfg)
	pl.finish(err == nil)
	if err != nil {
		if sig.caught() {
			return sig.interrupted(fmt.Sprintf("eval interrupted after %d of %d episodes; nothing written", bar.done, bar.total))
		}
		return fmt.Errorf("eval: %w", err)
	}
	if rep := res.Report; rep != nil {
		st := rep.Stats
		log.Info().Int("episodes", st.Episodes).Int("env_steps", st.EnvSteps).Int("gen_tokens", st.GenTokens).
			Int("prompt_tokens_seen", st.PromptTokensSeen).Int("prompt_tokens_decoded", st.PromptTokensDecoded).Int("prompt_tokens_unique", st.PromptTokensUnique).
			Str("took", logDur(time.Since(start))).Msg("eval")
	}
	for _, p := range res.Written {
		log.Info().Str("file", p).Msg("eval result written")
	}
	switch {
	case c.Bool(evalJSONFlag.Name):
		_, err = c.App.Writer.Write(res.JSON)
		return err
	case res.OOD != nil:
		printOOD(c, res.OOD)
	default:
		printEval(c, res.Report)
	}
	return nil
}

// evalBar logs the first finished episodes' estimate of the whole run's
// time, and off a terminal a line every 10 s (on a terminal progressLine
// shows the episodes).
type evalBar struct {
	start, last time.Time
	done, total int
	parallel    int // episodes in play at once: the estimate waits for as many
	estimated   bool
}

func (b *evalBar) update(done, total int) {
	b.done, b.total = done, total
	if !b.estimated && done >= min(max(b.parallel, 1), total) && done < total {
		b.estimated = true
		per := time.Since(b.start) / time.Duration(done)
		log.Info().Int("done", done).Int("total", total).Str("per_episode", logDur(per)).
			Str("estimated_total", logDur(per*time.Duration(total))).Msg("eval: first episodes timed")
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		return
	}
	if time.Since(b.last) >= 10*time.Second {
		b.last = time.Now()
		log.Info().Int("done", done).Int("total", total).Msg("eval episodes")
	}
}

// printEval prints the per-task table, memory settings side by side.
func printEval(c *cli.Context, rep *evaluate.Report) {
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	var cols []string
	var res []*evaluate.Result
	if rep.MemoryOff != nil {
		cols, res = append(cols, "memory off"), append(res, rep.MemoryOff)
	}
	if rep.MemoryOn != nil {
		cols, res = append(cols, "memory on"), append(res, rep.MemoryOn)
	}
	head := "task\tepisodes"
	for _, col := range cols {
		head += "\t" + col + " score\t" + col + " success"
	}
	fmt.Fprintln(w, head)
	var tasks []string
	for t := range res[0].Tasks {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	row := func(name string, get func(*evaluate.Result) evaluate.TaskResult) {
		line := fmt.Sprintf("%s\t%d", name, get(res[0]).Episodes)
		for _, r := range res {
			tr := get(r)
			line += fmt.Sprintf("\t%.1f\t%.0f%%", tr.ScoreMean, 100*tr.SuccessRate)
		}
		fmt.Fprintln(w, line)
	}
	for _, t := range tasks {
		row(t, func(r *evaluate.Result) evaluate.TaskResult { return r.Tasks[t] })
	}
	row("overall", func(r *evaluate.Result) evaluate.TaskResult { return r.TaskResult })
	w.Flush()
	for i, r := range res {
		ends := make([]string, len(rollout.Ends))
		for k, e := range rollout.Ends {
			ends[k] = fmt.Sprintf("%s %d", e, r.EndReasons[string(e)])
		}
		fmt.Fprintf(c.App.Writer, "episodes ended (%s): %s\n", cols[i], strings.Join(ends, ", "))
	}
	fmt.Fprintf(c.App.Writer, "split %s, temperature %g, seed %d\n", rep.Split, rep.Temperature, rep.Seed)
}

// printOOD prints the score per trial, memory on beside the control.
func printOOD(c *cli.Context, rep *evaluate.OODReport) {
	fmt.Fprintf(c.App.Writer, "held-out tasks %s: %d variations, %d trials each\n", strings.Join(rep.Tasks, ", "), rep.Variations, rep.Trials)
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "trial\tmemory on score\tsuccess\ttips written\tmemory off score\tsuccess")
	for k := 0; k < rep.Trials; k++ {
		fmt.Fprintf(w, "%d\t%.1f\t%.0f%%\t%d\t%.1f\t%.0f%%\n", k+1, rep.MemoryOn.ScorePerTrial[k], 100*rep.MemoryOn.SuccessPerTrial[k],
			rep.MemoryOn.TipsPerTrial[k], rep.MemoryOff.ScorePerTrial[k], 100*rep.MemoryOff.SuccessPerTrial[k])
	}
	w.Flush()
	fmt.Fprintf(c.App.Writer, "improvement trial 1 → %d: memory on %+.1f (%+.0f%%), memory off %+.1f (%+.0f%%)\n", rep.Trials,
		rep.MemoryOn.Improvement, rep.MemoryOn.ImprovementPct, rep.MemoryOff.Improvement, rep.MemoryOff.ImprovementPct)
}
