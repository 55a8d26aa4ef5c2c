package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

// `empo2 sft eval`: greedy (temperature 0) episodes of a model (+ adapter)
// in an environment, without memory — the check of an SFT warm start
// (docs/sft.md). `empo2 eval` is the full evaluation (memory on/off, JSON
// report); this one only needs the prompt format.

var (
	sftEvalLoraFlag  = &cli.StringFlag{Name: "lora", Usage: "LoRA adapter GGUF `FILE`"}
	sftEvalCtxFlag   = &cli.IntFlag{Name: "ctx", Usage: "tokens per sequence (0: the model's context)"}
	sftEvalScoreFlag = &cli.Float64Flag{Name: "success-score", Usage: "success = done and score above this", Value: 70}
	sftEvalListFlag  = &cli.BoolFlag{Name: "episodes", Usage: "print every episode (task, variation, score, actions)"}
	sftEvalModelFlag = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "model GGUF `FILE`", Required: true}
)

func sftEvalCommand() *cli.Command {
	return &cli.Command{
		Name:      "eval",
		Usage:     "play episodes greedily (temperature 0, no memory) and print the success rate per task",
		ArgsUsage: "ENV",
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
	all, err := spec.Tasks(opts)
	if err != nil {
		return err
	}
	tasks, err := pickTasks(all, splitList(c.StringSlice(demosTasksFlag.Name)), c.Bool(demosHeldFlag.Name))
	if err != nil {
		return err
	}
	m, err := llama.LoadModel(c.String(sftEvalModelFlag.Name), llama.ModelParams{})
	if err != nil {
		return err
	}
	defer m.Close()
	lc, err := llama.NewContext(m, llama.ContextParams{NCtx: c.Int(sftEvalCtxFlag.Name), Threads: sftThreads(c)})
	if err != nil {
		return err
	}
	defer lc.Close()
	if p := c.String(sftEvalLoraFlag.Name); p != "" {
		a, err := m.LoadAdapter(p)
		if err != nil {
			return err
		}
		if err := lc.SetAdapter(a, 1); err != nil {
			return err
		}
	}
	rend, err := rollout.NewRenderer(m, pc)
	if err != nil {
		return err
	}
	env, err := spec.New(opts)
	if err != nil {
		return err
	}
	defer env.Close()
	w := c.App.Writer
	var results []evaluate.GreedyResult
	for _, t := range tasks {
		vars, err := t.VariationsIn(split)
		if err != nil {
			return err
		}
		if n := c.Int(demosVarsFlag.Name); n > 0 && n < len(vars) {
			vars = vars[:n]
		}
		limit := environments.StepLimit(t, opts)
		for _, v := range vars {
			r, err := evaluate.GreedyEpisode(c.Context, lc, rend, env, t.Name, v, limit, c.Float64(sftEvalScoreFlag.Name))
			if err != nil {
				return err
			}
			if c.Bool(sftEvalListFlag.Name) && !c.Bool(sftJSONFlag.Name) {
				fmt.Fprintf(w, "%s/%d: score %s done %v steps %d: %q\n", r.Task, r.Variation, envFmtScore(r.Score), r.Done, r.Steps, r.Actions)
			}
			results = append(results, r)
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
