package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/demos"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// `empo2 env demos`: demonstrations as chat JSONL for `empo2 sft`
// (docs/sft.md).

var (
	demosTasksFlag   = &cli.StringSliceFlag{Name: "tasks", Usage: "task `NAMES` (comma-separated or repeated; default: every task not held out)"}
	demosSplitFlag   = &cli.StringFlag{Name: "split", Usage: "variation split: train, dev or test", Value: "train"}
	demosVarsFlag    = &cli.IntFlag{Name: "variations", Usage: "at most `N` variations per task, the first of the split (after --skip-variations; 0: all)"}
	demosSkipFlag    = &cli.IntFlag{Name: "skip-variations", Usage: "leave out the first `N` variations of the split per task (e.g. those an RL run trains on)"}
	demosOutFlag     = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "JSONL `FILE` to write", Required: true}
	demosPerStepFlag = &cli.BoolFlag{Name: "per-step", Usage: "one record per step instead of one packed record per episode (last-k history needs this)"}
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

	promptHistoryFlag = &cli.StringFlag{Name: "history", Usage: "prompt history: full or last-k", Value: string(rollout.HistoryFull)}
	promptKFlag       = &cli.IntFlag{Name: "history-k", Usage: "turns kept with --history last-k", Value: rollout.DefaultPromptConfig().HistoryK}
	promptFormatFlag  = &cli.StringFlag{Name: "action-format", Usage: "naive (one action line) or cot (<action>…</action>)", Value: string(rollout.FormatNaive)}
	promptSystemFlag  = &cli.StringFlag{Name: "system", Usage: "system `TEXT` (default: the trainer's)"}
)

// envDemosCommand is the `env demos` subcommand (listed in env.go).
func envDemosCommand() *cli.Command {
	return &cli.Command{
		Name:      "demos",
		Usage:     "write gold (or exploring) demonstrations as chat JSONL in the trainer's prompt format, for `empo2 sft`",
		ArgsUsage: "ENV",
		Description: "Each episode is played through the environment and written in exactly the prompt format of\n" +
			"the rollouts (system text, task, history, action format), followed by a tip-writing turn.\n" +
			"Only episodes that end done with a positive score are written. See docs/sft.md.",
		Flags: append([]cli.Flag{demosTasksFlag, demosSplitFlag, demosVarsFlag, demosSkipFlag, demosOutFlag, demosPerStepFlag, demosKindFlag,
			demosNoTipsFlag, demosHeldFlag, demosSeedFlag, demosTextFlag, demosTipRecFlag, demosTipFailFlag, demosFailTipFlag, demosThreshFlag, demosTopKFlag, demosTipsInFlag, demosAttemptFlag,
			promptHistoryFlag, promptKFlag, promptFormatFlag, promptSystemFlag}, envOptionFlags()...),
		Action: envDemos,
	}
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

func envDemos(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("want ENV, got %d arguments (environments: %s)", c.NArg(), strings.Join(environments.Names(), ", "))
	}
	name := c.Args().First()
	spec, opts, split, pc, err := envSplitPrompt(c, name)
	if err != nil {
		return err
	}
	kind := demos.Kind(c.String(demosKindFlag.Name))
	if !kind.Valid() {
		return fmt.Errorf("--kind %q: want %s or %s", kind, demos.KindGold, demos.KindExplore)
	}
	perStep := c.Bool(demosPerStepFlag.Name)
	if pc.History != rollout.HistoryFull && !perStep {
		return fmt.Errorf("--history %s changes the prompt at every step: add --per-step", pc.History)
	}
	if c.Int(demosVarsFlag.Name) < 0 {
		return fmt.Errorf("--variations %d is negative", c.Int(demosVarsFlag.Name))
	}
	if c.Int(demosSkipFlag.Name) < 0 {
		return fmt.Errorf("--skip-variations %d is negative", c.Int(demosSkipFlag.Name))
	}
	tcfg := demos.DefaultTipRecordConfig()
	tcfg.Prompt, tcfg.Records, tcfg.Failures = pc, c.Int(demosTipRecFlag.Name), c.Int(demosTipFailFlag.Name)
	tcfg.TopK, tcfg.Threshold, tcfg.Seed = c.Int(demosTopKFlag.Name), c.Float64(demosThreshFlag.Name), c.Int64(demosSeedFlag.Name)
	tcfg.FailureTips, tcfg.TipsIn = c.Bool(demosFailTipFlag.Name), rollout.TipsIn(c.String(demosTipsInFlag.Name))
	if err := tcfg.Check(); err != nil {
		return err
	}
	if n := c.Int(demosAttemptFlag.Name); n < 0 {
		return fmt.Errorf("--attempt-tips %d is negative", n)
	}
	out, textPath := c.String(demosOutFlag.Name), c.String(demosTextFlag.Name)
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "--out", Path: out}, {Flag: "--text", Path: textPath}},
		[]safefile.Path{{Flag: "--data", Path: c.String(envDataFlag.Name), Dir: true}, {Flag: "--scienceworld-jar", Path: c.String(envJarFlag.Name)}}); err != nil {
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
	// the variations of each task, before anything is played or written
	skip, nvars := c.Int(demosSkipFlag.Name), c.Int(demosVarsFlag.Name)
	taskVars := make([][]int, len(tasks))
	var left int
	var exhausted []string
	for i, t := range tasks {
		vars, err := t.VariationsIn(split)
		if err != nil {
			return err
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
		return fmt.Errorf("--skip-variations %d leaves no variation to play: %s %s variations", skip, strings.Join(exhausted, ", "), split)
	}
	for _, e := range exhausted {
		log.Warn().Msgf("--skip-variations %d leaves no variation of a task: %s %s variations", skip, e, split)
	}
	ctx, sig := interruptible(c)
	defer sig.stop()
	env, err := spec.New(opts)
	if err != nil {
		return err
	}
	defer env.Close()
	w, err := safefile.Create(out, 0o644)
	if err != nil {
		return err
	}
	defer w.Abort()
	var text strings.Builder
	dcfg := demos.Config{Prompt: pc, PerStep: perStep, NoTips: c.Bool(demosNoTipsFlag.Name)}
	var mem *memstore.Store // the memory --tip-records retrieves from (a temporary file)
	if tcfg.Records > 0 {
		dir, err := os.MkdirTemp("", "empo2-demo-tips-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		mem, err = memstore.Open(filepath.Join(dir, "tips.db"), memstore.NewHashEmbedder(memstore.DefaultDim).WithMaxPieces(rollout.DefaultKeyPieces))
		if err != nil {
			return err
		}
		defer mem.Close()
	}
	var tipRecords, failTips, attemptTips int
	var episodes, steps, records, skipped int
	// fail is err, or after SIGINT/SIGTERM the interrupt (the deferred
	// Abort removes the unfinished output)
	fail := func(err error) error {
		if sig.caught() {
			return sig.interrupted(fmt.Sprintf("env demos interrupted after %d episodes; %s not written", episodes, out))
		}
		return err
	}
	log.Info().Int("variations", left).Int("tasks", len(tasks)).Str("out", out).Msg("env demos: playing")
	for i, t := range tasks {
		for _, v := range taskVars[i] {
			var d demos.Demo
			if kind == demos.KindExplore {
				d, err = demos.Explore(ctx, env, name, t.Name, v, c.Int64(demosSeedFlag.Name))
			} else {
				d, err = demos.Gold(ctx, env, name, t.Name, v, c.Int64(demosSeedFlag.Name))
			}
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return fail(err)
			}
			if !d.Done || d.Score <= 0 {
				skipped++
				log.Warn().Str("task", t.Name).Int("variation", v).Float64("score", d.Score).Bool("done", d.Done).Msg("demo does not complete the task: skipped")
				continue
			}
			recs, err := demos.Records(d, dcfg)
			if err != nil {
				return err
			}
			if mem != nil {
				trecs, err := demos.TipRecords(ctx, env, d, mem, tcfg)
				if err != nil {
					return fail(err)
				}
				recs = append(recs, trecs...)
				for _, r := range trecs {
					if r.Meta["failed"] == true {
						failTips++
					} else {
						tipRecords++
					}
				}
			}
			arecs, err := demos.AttemptTipRecords(c.Context, env, d, c.Int(demosAttemptFlag.Name), environments.StepLimit(t, opts), pc, c.Int64(demosSeedFlag.Name))
			if err != nil {
				return err
			}
			recs = append(recs, arecs...)
			attemptTips += len(arecs)
			if err := sft.WriteChatJSONL(w, recs); err != nil {
				return err
			}
			if textPath != "" {
				for _, r := range recs {
					for _, m := range r.Messages {
						text.WriteString(m.Content)
						text.WriteByte('\n')
					}
				}
			}
			episodes++
			steps += len(d.Steps)
			records += len(recs)
		}
	}
	if episodes == 0 {
		return fmt.Errorf("%w: no demonstration completed its task (%d skipped); nothing written", demos.ErrDemo, skipped)
	}
	if textPath != "" {
		if err := safefile.WriteFile(textPath, []byte(text.String()), 0o644); err != nil {
			return err
		}
	}
	if err := w.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s: %d episodes, %d steps, %d records (%d with retrieved tips, %d failed-attempt tip turns; %s demos, %s split, history %s); %d skipped\n",
		out, episodes, steps, records, tipRecords, failTips, kind, split, pc.History, skipped)
	if attemptTips > 0 {
		fmt.Fprintf(c.App.Writer, "  %d of the records are tip turns after astray attempts (--attempt-tips)\n", attemptTips)
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

// pickTasks returns the named tasks of all (in the given order), or, with no
// names, every task that is not held out (held-out ones too with heldOut).
func pickTasks(all []environments.Task, names []string, heldOut bool) ([]environments.Task, error) {
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

// envSplitPrompt resolves what `env demos` and `sft eval` share: the
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
