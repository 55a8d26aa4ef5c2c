package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/trainer/demos"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

// `empo2 sft eval`: greedy (temperature 0) episodes of a model (+ adapter)
// in an environment, without memory — the check of an SFT warm start
// (docs/sft.md): evaluate.Run at temperature 0 with a per-episode listing.

var (
	sftEvalLoraFlag  = &cli.StringFlag{Name: "lora", Usage: "LoRA adapter GGUF `FILE`"}
	sftEvalCtxFlag   = &cli.IntFlag{Name: "ctx", Usage: "tokens per episode (prompt + action)", DefaultText: strconv.Itoa(evalDef.Context)}
	sftEvalScoreFlag = &cli.Float64Flag{Name: "success-score", Usage: "an episode succeeds when its final score reaches this, 0: the environment's: 71 on scienceworld (the EMPO² recipe's score above 70), 100 elsewhere (rollout.success_score)", DefaultText: yamlFloat(evalDef.Rollout.SuccessScore)}
	sftEvalListFlag  = &cli.BoolFlag{Name: "episodes", Usage: "print every episode (task, variation, score, actions)"}
	sftEvalModelFlag = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "model GGUF `FILE`", Required: true}
)

func sftEvalCommand() *cli.Command {
	return &cli.Command{
		Name:      "eval",
		Usage:     "play episodes greedily (temperature 0, no memory) and print the success rate per task",
		ArgsUsage: "ENV",
		Description: "The rollout engine of training and `empo2 eval` at temperature 0 (greedy decoding), one\n" +
			"episode per variation, memory off; success is eval's rule (final score ≥ --success-score).",
		Flags: append([]cli.Flag{sftEvalModelFlag, sftEvalLoraFlag, demosTasksFlag, demosSplitFlag, demosVarsFlag, demosHeldFlag,
			llmThreadsFlag, sftEvalCtxFlag, sftEvalScoreFlag, sftEvalListFlag, sftJSONFlag,
			promptHistoryFlag, promptKFlag, promptFormatFlag, promptSystemFlag}, envOptionFlags()...),
		Action: sftEvalAction,
	}
}

func sftEvalAction(c *cli.Context) error {
	if err := checkThreads(c); err != nil {
		return err
	}
	if c.NArg() != 1 {
		return fmt.Errorf("want ENV, got %d arguments", c.NArg())
	}
	name := c.Args().First()
	spec, opts, split, pc, err := envSplitPrompt(c, name)
	if err != nil {
		return err
	}
	if err := checkEnvOpts(name, opts); err != nil {
		return err
	}
	all, err := spec.Tasks(opts)
	if err != nil {
		return err
	}
	tasks, err := demos.PickTasks(all, splitList(c.StringSlice(demosTasksFlag.Name)), c.Bool(demosHeldFlag.Name))
	if err != nil {
		return err
	}
	if n := c.Int(demosVarsFlag.Name); n < 0 {
		return fmt.Errorf("--variations %d is negative", n)
	}
	// eval at temperature 0, memory off, one episode per variation, one at a time
	cfg := evaluate.DefaultRunConfig()
	cfg.Model, cfg.LoRA, cfg.Env, cfg.EnvOptions = c.String(sftEvalModelFlag.Name), c.String(sftEvalLoraFlag.Name), name, opts
	for _, t := range tasks {
		cfg.Tasks = append(cfg.Tasks, t.Name)
	}
	cfg.Eval = evaluate.Protocol{Episodes: 1, MaxVariations: c.Int(demosVarsFlag.Name), Split: split, Temperature: 0, Memory: evaluate.MemoryOff}
	cfg.Rollout.Prompt, cfg.Parallel, cfg.Threads = pc, 1, c.Int(llmThreadsFlag.Name)
	if c.IsSet(sftEvalCtxFlag.Name) {
		cfg.Context = c.Int(sftEvalCtxFlag.Name)
	}
	if c.IsSet(sftEvalScoreFlag.Name) {
		cfg.Rollout.SuccessScore = c.Float64(sftEvalScoreFlag.Name)
	}
	cfg.Warn = func(msg string) { log.Warn().Msg(msg) }
	ctx, sig := interruptible(c)
	defer sig.stop()
	res, err := evaluate.Run(ctx, cfg)
	if err != nil {
		if sig.caught() {
			return sig.interrupted("sft eval interrupted")
		}
		return err
	}
	results := evaluate.GreedyResults(res.Report.OffEpisodes)
	w := c.App.Writer
	if c.Bool(sftEvalListFlag.Name) && !c.Bool(sftJSONFlag.Name) {
		for _, r := range results {
			fmt.Fprintf(w, "%s/%d: score %s done %v steps %d: %q\n", r.Task, r.Variation, envFmtScore(r.Score), r.Done, r.Steps, r.Actions)
		}
	}
	sum := evaluate.SummarizeGreedy(results)
	if c.Bool(sftJSONFlag.Name) {
		out := map[string]any{"env": name, "split": split, "summary": sum}
		if c.Bool(sftEvalListFlag.Name) {
			out["episodes"] = results
		}
		return json.NewEncoder(w).Encode(out)
	}
	tw := newTable(w, "TASK", "EPISODES", "SUCCESSES", "SUCCESS", "MEAN SCORE")
	for _, s := range sum {
		tw.Append([]string{s.Task, strconv.Itoa(s.Episodes), strconv.Itoa(s.Successes), fmt.Sprintf("%.1f%%", 100*s.Success), fmt.Sprintf("%.1f", s.MeanScore)})
	}
	tw.Render()
	return nil
}

// promptConfigFlags reads the prompt flags.
func promptConfigFlags(c *cli.Context) (rollout.PromptConfig, error) {
	pc := rollout.DefaultPromptConfig()
	pc.History = rollout.History(c.String(promptHistoryFlag.Name))
	pc.HistoryK = c.Int(promptKFlag.Name)
	pc.ActionFormat = rollout.ActionFormat(c.String(promptFormatFlag.Name))
	pc.System = c.String(promptSystemFlag.Name)
	return pc.Normalize()
}

// envSplitPrompt resolves what `sft eval` reads besides its model: the
// environment, its options (--env-opt, --data, …), --split and the prompt
// format flags.
func envSplitPrompt(c *cli.Context, name string) (environments.Spec, environments.Options, environments.Split, rollout.PromptConfig, error) {
	var (
		spec  environments.Spec
		opts  environments.Options
		split environments.Split
		pc    rollout.PromptConfig
		err   error
	)
	if spec, err = environments.Lookup(name); err != nil {
		return spec, opts, split, pc, err
	}
	if opts, err = envOptions(c); err != nil {
		return spec, opts, split, pc, err
	}
	if split, err = environments.ParseSplit(c.String(demosSplitFlag.Name)); err != nil {
		return spec, opts, split, pc, err
	}
	pc, err = promptConfigFlags(c)
	return spec, opts, split, pc, err
}
