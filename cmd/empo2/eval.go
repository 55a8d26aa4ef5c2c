package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// Flags of `empo2 eval`.
var (
	evalModelFlag      = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "policy model GGUF `FILE` (default with --run: the run's model)"}
	evalLoraFlag       = &cli.StringFlag{Name: "lora", Usage: "LoRA adapter GGUF `FILE` to evaluate"}
	evalRunFlag        = &cli.StringFlag{Name: "run", Usage: "training run `DIR`: its model, config, memory and checkpoint adapter"}
	evalCkptFlag       = &cli.IntFlag{Name: "checkpoint", Usage: "checkpoint step `N` of --run", Value: -1, DefaultText: "latest"}
	evalEnvFlag        = &cli.StringFlag{Name: "env", Usage: "environment `NAME` (default: the run's, else textlab)"}
	evalTasksFlag      = &cli.StringSliceFlag{Name: "tasks", Usage: "task `NAMES` (comma-separated or repeated; default: every task not held out, with --ood the held-out ones)"}
	evalSplitFlag      = &cli.StringFlag{Name: "split", Usage: "variation split: train, dev or test", Value: "test"}
	evalMemoryFlag     = &cli.StringFlag{Name: "memory", Usage: "memory setting: off, on or both", Value: string(evaluate.MemoryOff)}
	evalMemoryDBFlag   = &cli.StringFlag{Name: "memory-db", Usage: "tips memory `FILE` for --memory on|both (default with --run: the run's memory.db, read-only)"}
	evalWriteTipsFlag  = &cli.BoolFlag{Name: "write-tips", Usage: "memory-on episodes write tips into the memory (eval never changes it otherwise)"}
	evalEpisodesFlag   = &cli.IntFlag{Name: "episodes", Usage: "episodes per task variation", Value: 1}
	evalVarsFlag       = &cli.IntFlag{Name: "variations", Usage: "evaluate the first `N` variations of the split per task (0: all)"}
	evalTempFlag       = &cli.Float64Flag{Name: "temperature", Aliases: []string{"t"}, Usage: "sampling temperature (0: greedy)", Value: 0.4}
	evalSeedFlag       = &cli.Int64Flag{Name: "seed", Usage: "seed of the episodes' sampling", Value: 1}
	evalJSONFlag       = &cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object (with --run also written to DIR/eval/)"}
	evalOutFlag        = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "also write the JSON result to `FILE`"}
	evalOODFlag        = &cli.BoolFlag{Name: "ood", Usage: "out-of-distribution adaptation: --trials consecutive trials per held-out variation with a fresh memory, and the same without memory"}
	evalTrialsFlag     = &cli.IntFlag{Name: "trials", Usage: "trials per variation with --ood", Value: 3}
	evalParallelFlag   = &cli.IntFlag{Name: "parallel", Usage: "episodes decoded together (KV sequences)", Value: 8}
	evalCtxFlag        = &cli.IntFlag{Name: "ctx", Usage: "tokens per episode (prompt + action); may exceed the model's training context (RoPE)", Value: 2048}
	evalGPULayersFlag  = &cli.IntFlag{Name: "gpu-layers", Usage: "layers to offload to a GPU backend (-1: all)"}
	evalActionTokFlag  = &cli.IntFlag{Name: "max-action-tokens", Usage: "generation limit per action (0: the run's, else 32 naive / 128 cot)"}
	evalHistoryFlag    = &cli.StringFlag{Name: "history", Usage: "history in the prompt: full or last-k (default: the run's, else full)"}
	evalHistoryKFlag   = &cli.IntFlag{Name: "history-k", Usage: "turns kept with --history last-k"}
	evalFormatFlag     = &cli.StringFlag{Name: "action-format", Usage: "naive or cot (default: the run's, else naive)"}
	evalEmbedderFlag   = &cli.StringFlag{Name: "embedder", Usage: "retrieval embedder: hash, policy or a GGUF `FILE` (default: the run's, else hash)"}
	evalThresholdFlag  = &cli.Float64Flag{Name: "threshold", Usage: "retrieval cosine threshold (0: the run's, else 0.5)"}
	evalTipsInFlag     = &cli.StringFlag{Name: "tips-in", Usage: "where retrieved tips stay: every-turn or last-turn (default: the run's, else every-turn)"}
	evalTopKFlag       = &cli.IntFlag{Name: "top-k", Usage: "tips per prompt (0: the run's, else 10)"}
	evalTipTempFlag    = &cli.Float64Flag{Name: "tip-temperature", Usage: "sampling temperature of written tips (--ood, --write-tips); < 0: --temperature", DefaultText: "the run's rollout.tip_temperature, else --temperature"}
	evalSuccessFlag    = &cli.Float64Flag{Name: "success-score", Usage: "an episode succeeds when its score reaches this (0: the environment's: 71 on scienceworld, the EMPO² recipe's score above 70; 100 elsewhere)"}
	evalMemorySettings = map[evaluate.MemorySetting]bool{evaluate.MemoryOff: true, evaluate.MemoryOn: true, evaluate.MemoryBoth: true}
)

func init() {
	register(&cli.Command{
		Name:  "eval",
		Usage: "evaluate a policy with and without memory, or its adaptation to held-out tasks (--ood)",
		Description: "Plays --episodes episodes per task variation of --split with the rollout engine of training\n" +
			"(batched, each episode its own KV sequence) at --temperature, with memory off, on or both (same\n" +
			"seeds), and prints a per-task table and the overall mean score and success rate. With --run DIR\n" +
			"the run's model, configuration, memory (read-only) and checkpoint adapter are used.\n" +
			"--ood runs --trials consecutive trials per held-out variation, writing a tip after each trial into\n" +
			"a fresh memory (no weight updates), and the same trials without memory as the control.\n" +
			"Examples:\n" +
			"  empo2 eval --model tiny.gguf --env textlab --tasks melt --variations 2 --memory both --memory-db mem.db --json\n" +
			"  empo2 eval --run runs/a --split dev --memory both --episodes 2\n" +
			"  empo2 eval --model tiny.gguf --lora adapter.gguf --ood --trials 3 --variations 2",
		Flags: append([]cli.Flag{evalModelFlag, evalLoraFlag, evalRunFlag, evalCkptFlag, evalEnvFlag, evalTasksFlag, evalSplitFlag,
			evalMemoryFlag, evalMemoryDBFlag, evalWriteTipsFlag, evalEpisodesFlag, evalVarsFlag, evalTempFlag, evalSeedFlag,
			evalJSONFlag, evalOutFlag, evalOODFlag, evalTrialsFlag, evalParallelFlag, llmThreadsFlag, evalCtxFlag, evalGPULayersFlag,
			evalActionTokFlag, evalHistoryFlag, evalHistoryKFlag, evalFormatFlag, evalEmbedderFlag, evalThresholdFlag, evalTopKFlag, evalTipsInFlag, evalTipTempFlag,
			evalSuccessFlag}, envOptionFlags()...),
		Action: evalAction,
	})
}

// evalSetup is what eval opens.
type evalSetup struct {
	model    *llama.Model
	lctx     *llama.Context
	adapter  *llama.Adapter
	store    *memstore.Store
	embClose func() error
	roller   *rollout.Roller
	runDir   string
	step     int // checkpoint step (-1: none)
	model0   string
	lora     string
}

func (s *evalSetup) Close() {
	if s.store != nil {
		s.store.Close()
	}
	if s.embClose != nil {
		_ = s.embClose()
	}
	s.lctx.Close()
	s.adapter.Close()
	s.model.Close()
}

func evalAction(c *cli.Context) error {
	if err := checkThreads(c); err != nil {
		return err
	}
	if c.Args().Len() > 0 {
		return fmt.Errorf("eval: unexpected argument %q", c.Args().First())
	}
	if err := checkEvalOut(c); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	s, err := openEval(c)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer s.Close()
	bar := &evalBar{last: time.Now()}
	progress := bar.update
	split, err := environments.ParseSplit(c.String(evalSplitFlag.Name))
	if err != nil {
		return fmt.Errorf("eval: --split: %w", err)
	}
	start := time.Now()
	var out any
	if c.Bool(evalOODFlag.Name) {
		if c.Int(evalTrialsFlag.Name) < 1 {
			return fmt.Errorf("eval: --trials %d: want at least 1", c.Int(evalTrialsFlag.Name))
		}
		emb, closeEmb, err := rollout.OpenEmbedder(s.roller.MemoryConfig(), s.model, c.Int(llmThreadsFlag.Name))
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		defer closeEmb()
		rep, err := evaluate.EvaluateOOD(c.Context, s.roller, evaluate.OODConfig{
			Tasks: splitList(c.StringSlice(evalTasksFlag.Name)), Split: split, MaxVariations: c.Int(evalVarsFlag.Name),
			Trials: c.Int(evalTrialsFlag.Name), Temperature: c.Float64(evalTempFlag.Name), SuccessScore: c.Float64(evalSuccessFlag.Name),
			Seed: c.Int64(evalSeedFlag.Name), Embedder: emb, Progress: progress,
		})
		bar.finish()
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		out = rep
		if !c.Bool(evalJSONFlag.Name) {
			printOOD(c, rep)
		}
	} else {
		mem := evaluate.MemorySetting(c.String(evalMemoryFlag.Name))
		rep, err := evaluate.Evaluate(c.Context, s.roller, evaluate.Config{
			Tasks: splitList(c.StringSlice(evalTasksFlag.Name)), Split: split, Episodes: c.Int(evalEpisodesFlag.Name),
			MaxVariations: c.Int(evalVarsFlag.Name), Memory: mem, Temperature: c.Float64(evalTempFlag.Name),
			SuccessScore: c.Float64(evalSuccessFlag.Name), Seed: c.Int64(evalSeedFlag.Name),
			WriteTips: c.Bool(evalWriteTipsFlag.Name), TrainStep: int64(max(s.step, 0)), Progress: progress,
		})
		bar.finish()
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		out = rep
		st := rep.Stats
		log.Info().Int("episodes", st.Episodes).Int("env_steps", st.EnvSteps).Int("gen_tokens", st.GenTokens).
			Int("prompt_tokens_seen", st.PromptTokensSeen).Int("prompt_tokens_decoded", st.PromptTokensDecoded).Int("prompt_tokens_unique", st.PromptTokensUnique).
			Dur("took", time.Since(start).Round(time.Millisecond)).Msg("eval")
		if !c.Bool(evalJSONFlag.Name) {
			printEval(c, rep)
		}
		for _, r := range []*evaluate.Result{rep.MemoryOff, rep.MemoryOn} {
			if r == nil {
				continue
			}
			if w := rollout.ContextWarning(r.EndReasons, s.lctx.NCtxSeq()); w != "" {
				log.Warn().Msg(w)
				break
			}
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if c.Bool(evalJSONFlag.Name) {
		if _, err := c.App.Writer.Write(b); err != nil {
			return err
		}
		if s.runDir != "" {
			// DIR/eval/*.json all have the schema of evaluate.Report; OOD
			// reports (evaluate.OODReport) go one level down, to DIR/eval/ood/
			kind := "eval-" + c.String(evalSplitFlag.Name) + "-" + c.String(evalMemoryFlag.Name)
			sub := "eval"
			if c.Bool(evalOODFlag.Name) {
				kind = fmt.Sprintf("ood-%s-k%d", c.String(evalSplitFlag.Name), c.Int(evalTrialsFlag.Name))
				sub = filepath.Join("eval", "ood")
			}
			p := filepath.Join(s.runDir, sub, fmt.Sprintf("%s-step-%06d.json", kind, max(s.step, 0)))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("eval: %w", err)
			}
			if err := safefile.WriteFile(p, b, 0o644); err != nil {
				return fmt.Errorf("eval: %w", err)
			}
			log.Info().Str("file", p).Msg("eval result written to the run")
		}
	}
	if p := c.String(evalOutFlag.Name); p != "" {
		if err := safefile.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("eval: --out: %w", err)
		}
	}
	return nil
}

// checkEvalOut refuses an --out that is not a file path or is one of
// eval's inputs (the model, adapter, memory, embedder, the run's files),
// before anything is loaded.
func checkEvalOut(c *cli.Context) error {
	in := append([]safefile.Path{{Flag: "--model", Path: c.String(evalModelFlag.Name)}, {Flag: "--lora", Path: c.String(evalLoraFlag.Name)},
		{Flag: "--run", Path: c.String(evalRunFlag.Name), Dir: true,
			Files: []string{trainer.ConfigFile, trainer.MemoryFile, trainer.MetricsFile, trainer.EvalFile}}},
		dbPaths("--memory-db", c.String(evalMemoryDBFlag.Name))...)
	if e := c.String(evalEmbedderFlag.Name); e != rollout.EmbedderHash && e != rollout.EmbedderPolicy { // else a GGUF (rollout.OpenEmbedder)
		in = append(in, safefile.Path{Flag: "--embedder", Path: e})
	}
	return safefile.CheckOutputs([]safefile.Path{{Flag: "--out", Path: c.String(evalOutFlag.Name)}}, in)
}

// openEval loads the model, adapter, memory and roller from the flags (and
// the run directory).
func openEval(c *cli.Context) (*evalSetup, error) {
	mem := evaluate.MemorySetting(c.String(evalMemoryFlag.Name))
	if !evalMemorySettings[mem] {
		return nil, fmt.Errorf("--memory %q: want off, on or both", mem)
	}
	if c.Bool(evalOODFlag.Name) && c.IsSet(evalMemoryFlag.Name) {
		return nil, fmt.Errorf("--ood runs memory on and off itself; drop --memory")
	}
	if c.Int(evalEpisodesFlag.Name) < 1 || c.Int(evalVarsFlag.Name) < 0 {
		return nil, fmt.Errorf("--episodes must be ≥ 1 and --variations ≥ 0")
	}
	if n := c.Int(evalParallelFlag.Name); n < 1 || n > 256 {
		return nil, fmt.Errorf("--parallel %d: want 1..256", n)
	}
	if c.String(evalLoraFlag.Name) != "" && c.IsSet(evalCkptFlag.Name) {
		return nil, fmt.Errorf("--lora and --checkpoint both name an adapter; give one")
	}
	s := &evalSetup{step: -1, runDir: c.String(evalRunFlag.Name)}
	rc, mc := rollout.DefaultConfig(), rollout.DefaultMemoryConfig()
	envName, envOpts := "textlab", environments.Options{}
	var runCfg *trainer.Config
	if s.runDir != "" {
		cfg, err := trainer.LoadRunConfig(s.runDir, nil)
		if err != nil {
			return nil, err
		}
		runCfg = &cfg
		rc, mc = cfg.Rollout, cfg.Memory
		s.model0, envName = cfg.Model, cfg.Env
		envOpts = cfg.EnvOptions
		if c.String(evalLoraFlag.Name) == "" {
			if n := c.Int(evalCkptFlag.Name); n >= 0 {
				s.step = n
				s.lora = filepath.Join(s.runDir, optim.CheckpointsDir, optim.CheckpointName(n), optim.AdapterFile)
				if _, err := os.Stat(s.lora); err != nil {
					return nil, fmt.Errorf("--checkpoint %d: %w", n, err)
				}
			} else {
				info, ok, err := optim.LatestCheckpoint(s.runDir)
				if err != nil {
					return nil, err
				}
				if ok {
					s.step, s.lora = info.Step, filepath.Join(info.Dir, optim.AdapterFile)
				} else {
					log.Warn().Str("run", s.runDir).Msg("the run has no checkpoint yet: evaluating the base model")
				}
			}
		}
	} else if c.IsSet(evalCkptFlag.Name) {
		return nil, fmt.Errorf("--checkpoint needs --run DIR")
	}
	if p := c.String(evalModelFlag.Name); p != "" {
		s.model0 = p
	}
	if s.model0 == "" {
		return nil, fmt.Errorf("no model: give --model FILE or --run DIR")
	}
	if p := c.String(evalLoraFlag.Name); p != "" {
		s.lora = p
	}
	if v := c.String(evalEnvFlag.Name); v != "" {
		envName = v
	}
	flagOpts, err := envOptions(c)
	if err != nil {
		return nil, err
	}
	if runCfg == nil || anySet(c, envOptionFlags()) {
		envOpts = flagOpts
	}
	// prompt and retrieval overrides
	if v := c.Int(evalActionTokFlag.Name); v != 0 {
		rc.Prompt.MaxActionTokens = v
	}
	if v := c.String(evalHistoryFlag.Name); v != "" {
		rc.Prompt.History = rollout.History(v)
	}
	if v := c.Int(evalHistoryKFlag.Name); v != 0 {
		rc.Prompt.HistoryK = v
	}
	if v := c.String(evalFormatFlag.Name); v != "" {
		rc.Prompt.ActionFormat = rollout.ActionFormat(v)
	}
	if v := c.String(evalEmbedderFlag.Name); v != "" {
		mc.Embedder = v
	}
	if v := c.Float64(evalThresholdFlag.Name); v != 0 {
		mc.Threshold = v
	}
	if v := c.Int(evalTopKFlag.Name); v != 0 {
		mc.TopK = v
	}
	if v := c.String(evalTipsInFlag.Name); v != "" {
		if mc.TipsIn = rollout.TipsIn(v); !mc.TipsIn.Valid() {
			return nil, fmt.Errorf("--tips-in %q: want %s or %s", v, rollout.TipsEveryTurn, rollout.TipsLastTurn)
		}
	}
	if c.IsSet(evalTipTempFlag.Name) {
		v := c.Float64(evalTipTempFlag.Name)
		if v > 100 || math.IsNaN(v) {
			return nil, fmt.Errorf("--tip-temperature %v: want at most 100", v)
		}
		rc.TipTemperature = v
	}
	rc.Temperature = c.Float64(evalTempFlag.Name)

	threads := c.Int(llmThreadsFlag.Name)
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if s.model, err = llama.LoadModel(s.model0, llama.ModelParams{GPULayers: c.Int(evalGPULayersFlag.Name)}); err != nil {
		return nil, err
	}
	if s.lctx, err = llama.NewContext(s.model, llama.ContextParams{NCtx: c.Int(evalCtxFlag.Name), NSeqMax: c.Int(evalParallelFlag.Name), Threads: threads}); err != nil {
		return nil, err
	}
	if s.lora != "" {
		if s.adapter, err = s.model.LoadAdapter(s.lora); err != nil {
			return nil, err
		}
		if err := s.lctx.SetAdapter(s.adapter, 1); err != nil {
			return nil, err
		}
	}
	// memory: --memory-db, else the run's memory.db (read-only unless --write-tips)
	if mem != evaluate.MemoryOff && !c.Bool(evalOODFlag.Name) {
		db := c.String(evalMemoryDBFlag.Name)
		if db == "" && s.runDir != "" {
			db = filepath.Join(s.runDir, trainer.MemoryFile)
		}
		if db == "" {
			return nil, fmt.Errorf("--memory %s needs --memory-db FILE or --run DIR", mem)
		}
		if !c.Bool(evalWriteTipsFlag.Name) {
			if _, err := os.Stat(db); err != nil {
				return nil, fmt.Errorf("--memory-db: %w (eval reads an existing memory; --write-tips creates one)", err)
			}
		}
		emb, closeEmb, err := rollout.OpenEmbedder(mc, s.model, threads)
		if err != nil {
			return nil, err
		}
		s.embClose = closeEmb
		if s.store, err = memstore.Open(db, emb); err != nil {
			return nil, err
		}
	} else if c.String(evalMemoryDBFlag.Name) != "" && !c.Bool(evalOODFlag.Name) {
		return nil, fmt.Errorf("--memory-db is used with --memory on or both")
	}
	if s.roller, err = rollout.NewRoller(s.lctx, rc, rollout.Options{
		Env: envName, EnvOptions: envOpts, Memory: s.store, MemoryConfig: mc, ReadOnlyMemory: !c.Bool(evalWriteTipsFlag.Name),
		Seed: c.Int64(evalSeedFlag.Name), SuccessScore: c.Float64(evalSuccessFlag.Name),
	}); err != nil {
		return nil, err
	}
	log.Debug().Str("model", s.model0).Str("lora", s.lora).Str("env", envName).Int("checkpoint", s.step).Msg("eval setup")
	ok = true
	return s, nil
}

// anySet reports whether any of flags was given on the command line.
func anySet(c *cli.Context, flags []cli.Flag) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if c.IsSet(n) {
				return true
			}
		}
	}
	return false
}

// evalBar is a progress bar on a terminal, periodic log lines otherwise.
type evalBar struct {
	bar  *progressbar.ProgressBar
	last time.Time
}

func (b *evalBar) update(done, total int) {
	if term.IsTerminal(int(os.Stderr.Fd())) {
		if b.bar == nil {
			b.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("eval episodes"),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionClearOnFinish())
		}
		_ = b.bar.Set(done)
		return
	}
	if time.Since(b.last) >= 10*time.Second {
		b.last = time.Now()
		log.Info().Int("done", done).Int("total", total).Msg("eval episodes")
	}
}

func (b *evalBar) finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
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
