package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// `empo2 sft`: supervised fine-tuning of a LoRA adapter on chat JSONL, or
// with --full of every weight of a small F32 model (docs/sft.md).

// errFullFlag: a LoRA-only flag given with --full.
var errFullFlag = errors.New("does not apply to --full, which trains every weight and has no adapter")

var (
	sftModelFlag   = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "base model GGUF `FILE` (Qwen2 architecture; required)"}
	sftDataFlag    = &cli.StringFlag{Name: "data", Usage: "training chats, JSONL `FILE` ({\"messages\":[{\"role\",\"content\"}…]} per line; required)"}
	sftValFlag     = &cli.StringFlag{Name: "val", Usage: "validation chats, JSONL `FILE` (loss after every epoch)"}
	sftOutFlag     = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "adapter GGUF `FILE` to write (with --full: the new base model GGUF; required)"}
	sftRankFlag    = &cli.IntFlag{Name: "rank", Usage: "LoRA rank", Value: 16}
	sftAlphaFlag   = &cli.Float64Flag{Name: "alpha", Usage: "LoRA alpha (scale alpha/rank; default 2·rank)"}
	sftTargetsFlag = &cli.StringFlag{Name: "targets", Usage: "LoRA targets (comma-separated: q,k,v,o,gate,up,down)", Value: "q,k,v,o,gate,up,down"}
	sftEpochsFlag  = &cli.IntFlag{Name: "epochs", Usage: "passes over the data", Value: 3}
	sftLRFlag      = &cli.Float64Flag{Name: "lr", Usage: "peak learning rate (AdamW, cosine decay)", Value: 1e-3}
	sftMinLRFlag   = &cli.Float64Flag{Name: "min-lr", Usage: "final learning rate of the cosine schedule", Value: 1e-4}
	sftWarmupFlag  = &cli.IntFlag{Name: "warmup", Usage: "linear warmup steps", Value: 10}
	sftWDFlag      = &cli.Float64Flag{Name: "weight-decay", Usage: "AdamW decoupled weight decay"}
	sftClipFlag    = &cli.Float64Flag{Name: "clip", Usage: "global gradient-norm clip (0: off)", Value: 1}
	sftBatchFlag   = &cli.IntFlag{Name: "batch-tokens", Usage: "tokens per optimizer step (packed sequences, context included)", Value: 4096}
	sftMaxLenFlag  = &cli.IntFlag{Name: "max-len", Usage: "packing length and per-record cut in tokens (0: the model's context)"}
	sftNoPackFlag  = &cli.BoolFlag{Name: "no-pack", Usage: "one record per sequence (no packing)"}
	sftSeedFlag    = &cli.Int64Flag{Name: "seed", Usage: "seed of the shuffling and the LoRA init", Value: 1}
	sftCkptFlag    = &cli.StringFlag{Name: "checkpoint", Usage: "training-state `FILE` (default: OUT with .state.gguf)"}
	sftSaveFlag    = &cli.IntFlag{Name: "save-every", Usage: "write the checkpoint every `N` steps (and after every epoch)", Value: 50}
	sftResumeFlag  = &cli.BoolFlag{Name: "resume", Usage: "continue from the checkpoint if it exists"}
	sftInitFlag    = &cli.StringFlag{Name: "init", Usage: "start from this adapter GGUF `FILE` instead of a fresh one (same rank, alpha, targets; not with --full: pass the model to continue from as -m)"}
	sftFullFlag    = &cli.BoolFlag{Name: "full", Usage: "train every weight of an F32 model (embeddings, norms, head too) and write OUT as a new base GGUF; memory: 4× the model in F32 (weights, gradients, 2 AdamW moments) + activations; --rank/--alpha/--targets/--init do not apply"}
	sftJSONFlag    = &cli.BoolFlag{Name: "json", Usage: "print the epoch summaries as JSON lines"}
	sftMicroFlag   = &cli.IntFlag{Name: "micro-tokens", Usage: "padded tokens per forward/backward call (memory bound; 0: --max-len)"}
)

func init() {
	register(&cli.Command{
		Name:  "sft",
		Usage: "supervised fine-tuning of a LoRA adapter (or, --full, of every weight) on chat JSONL (loss on assistant tokens only)",
		Description: "Tokenizes every chat exactly as the rollouts do (rollout.Renderer), packs them up to --max-len,\n" +
			"shuffles with --seed, and trains cross-entropy on the assistant tokens (contents and end-of-turn\n" +
			"tokens) with AdamW. Writes OUT (a LoRA adapter; with --full a new base GGUF holding every trained\n" +
			"weight, for F32 models only) and a resumable checkpoint. Data: `empo2 env demos` or your own\n" +
			"{\"messages\":[…]} lines (docs/sft.md). Subcommand `sft eval` plays episodes greedily.",
		Flags: []cli.Flag{sftModelFlag, sftDataFlag, sftValFlag, sftOutFlag, sftRankFlag, sftAlphaFlag, sftTargetsFlag, sftEpochsFlag,
			sftLRFlag, sftMinLRFlag, sftWarmupFlag, sftWDFlag, sftClipFlag, sftBatchFlag, sftMaxLenFlag, sftNoPackFlag, sftSeedFlag,
			sftCkptFlag, sftSaveFlag, sftResumeFlag, sftInitFlag, llmThreadsFlag, sftFullFlag, sftJSONFlag, sftMicroFlag},
		Action:      sftAction,
		Subcommands: []*cli.Command{sftEvalCommand()},
	})
}

func sftThreads(c *cli.Context) int {
	if t := c.Int(llmThreadsFlag.Name); t > 0 {
		return t
	}
	return runtime.NumCPU()
}

func sftAction(c *cli.Context) error {
	if err := checkThreads(c); err != nil {
		return err
	}
	full := c.Bool(sftFullFlag.Name)
	if full {
		for _, f := range []string{sftRankFlag.Name, sftAlphaFlag.Name, sftTargetsFlag.Name, sftInitFlag.Name} {
			if c.IsSet(f) {
				return fmt.Errorf("--%s %w", f, errFullFlag)
			}
		}
	}
	if c.NArg() > 0 {
		return fmt.Errorf("sft takes no arguments, got %q (use --data FILE)", c.Args().Slice())
	}
	// checked here, not by the flag parser, so that `sft eval` does not need them
	for _, f := range []string{sftModelFlag.Name, sftDataFlag.Name, sftOutFlag.Name} {
		if c.String(f) == "" {
			return fmt.Errorf("--%s is required", f)
		}
	}
	for _, f := range []string{c.String(sftModelFlag.Name), c.String(sftDataFlag.Name)} {
		if _, err := os.Stat(f); err != nil {
			return err
		}
	}
	modelPath, out := c.String(sftModelFlag.Name), c.String(sftOutFlag.Name)
	if full && samePath(modelPath, out) {
		return fmt.Errorf("--out %s is the model being trained: write the new base model to another file", out)
	}
	targets, err := lora.ParseTargets(c.String(sftTargetsFlag.Name))
	if err != nil {
		return err
	}
	rank, alpha := c.Int(sftRankFlag.Name), c.Float64(sftAlphaFlag.Name)
	if !c.IsSet(sftAlphaFlag.Name) {
		alpha = float64(2 * rank)
	}
	if !full && rank < 1 {
		return fmt.Errorf("--rank %d must be ≥ 1", rank)
	}
	if !full && (!(alpha >= 0) || math.IsInf(alpha, 0)) {
		return fmt.Errorf("--alpha %v must be ≥ 0", alpha)
	}
	threads := sftThreads(c)
	lm, err := llama.LoadModel(modelPath, llama.ModelParams{})
	if err != nil {
		return err
	}
	defer lm.Close()
	rend, err := rollout.NewRenderer(lm, rollout.DefaultPromptConfig())
	if err != nil {
		return err
	}
	opts := cgo.Options{Threads: threads, MaxTokens: max(c.Int(sftMicroFlag.Name), c.Int(sftMaxLenFlag.Name))}
	var policy *cgo.Model
	if full {
		policy, err = cgo.LoadFull(modelPath, opts)
	} else {
		policy, err = cgo.Load(modelPath, cgo.LoRAConfig{Rank: rank, Alpha: float32(alpha), Targets: targets, Seed: c.Int64(sftSeedFlag.Name)}, opts)
	}
	if err != nil {
		return err
	}
	defer policy.Close()
	ctxLen := policy.Info().NCtxTrain
	cfg := sft.Config{
		Epochs: c.Int(sftEpochsFlag.Name), LR: c.Float64(sftLRFlag.Name), MinLR: c.Float64(sftMinLRFlag.Name),
		Warmup: c.Int(sftWarmupFlag.Name), WeightDecay: c.Float64(sftWDFlag.Name), MaxGradNorm: c.Float64(sftClipFlag.Name),
		BatchTokens: c.Int(sftBatchFlag.Name), MaxLen: c.Int(sftMaxLenFlag.Name), MicroTokens: c.Int(sftMicroFlag.Name),
		NoPack: c.Bool(sftNoPackFlag.Name), Seed: c.Int64(sftSeedFlag.Name), SaveEvery: c.Int(sftSaveFlag.Name),
		Resume: c.Bool(sftResumeFlag.Name), Full: full,
	}
	if cfg.MaxLen <= 0 || cfg.MaxLen > ctxLen {
		if cfg.MaxLen > ctxLen {
			log.Warn().Int("max_len", cfg.MaxLen).Int("ctx", ctxLen).Msg("--max-len exceeds the model context: using the context")
		}
		cfg.MaxLen = ctxLen
	}
	if cfg.MinLR > cfg.LR {
		cfg.MinLR = cfg.LR
	}
	cfg.Checkpoint = c.String(sftCkptFlag.Name)
	if cfg.Checkpoint == "" {
		cfg.Checkpoint = trimExt(out) + ".state.gguf"
	}
	load := func(path string) ([]sft.Sample, sft.TokenizeStats, error) {
		recs, err := sft.ReadChatFile(path)
		if err != nil {
			return nil, sft.TokenizeStats{}, err
		}
		return sft.TokenizeChats(rend, recs, cfg.MaxLen)
	}
	train, tst, err := load(c.String(sftDataFlag.Name))
	if err != nil {
		return err
	}
	if len(train) == 0 {
		return fmt.Errorf("%w: no record of %s has an assistant token within %d tokens", sft.ErrData, c.String(sftDataFlag.Name), cfg.MaxLen)
	}
	var val []sft.Sample
	if p := c.String(sftValFlag.Name); p != "" {
		if val, _, err = load(p); err != nil {
			return err
		}
	}
	steps := sft.Steps(train, cfg)
	log.Info().Int("records", tst.Records).Int("tokens", tst.Tokens).Int("trained_tokens", tst.Trained).
		Int("truncated", tst.Truncated).Int("dropped", tst.Dropped).Int("val_records", len(val)).
		Int64("steps", steps).Int("max_len", cfg.MaxLen).Int("threads", threads).Bool("full", full).Msg("sft data")
	if tst.Truncated > 0 {
		log.Warn().Int("records", tst.Truncated).Int("max_len", cfg.MaxLen).Msg("records longer than --max-len were cut (their tail is not trained)")
	}
	var u sft.Updater
	var lu *optim.Updater // LoRA
	var step func() int64
	if full {
		mem := policy.MemoryBytes()
		log.Info().Int("tensors", len(policy.Params())).Int64("state_bytes", mem.Params).
			Msg("full SFT: weights, gradients and AdamW moments on the backend")
		fu, err := sft.NewFullUpdater(policy, cfg, steps)
		if err != nil {
			return err
		}
		u, step = fu, func() int64 { return fu.Step }
	} else {
		if lu, err = sft.NewUpdater(policy, cfg, steps); err != nil {
			return err
		}
		if p := c.String(sftInitFlag.Name); p != "" {
			a, err := lora.Read(p)
			if err != nil {
				return err
			}
			if err := lu.LoadAdapter(a); err != nil {
				return err
			}
		}
		u, step = lu, func() int64 { return lu.Step }
	}
	var bar *progressbar.ProgressBar
	if term.IsTerminal(int(os.Stderr.Fd())) {
		bar = progressbar.NewOptions64(steps, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("sft"),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionClearOnFinish())
	}
	lastLog := time.Now()
	cfg.Progress = func(p sft.Progress) {
		if bar != nil {
			bar.Describe(fmt.Sprintf("sft epoch %d/%d loss %.4f", p.Epoch, p.Epochs, p.Loss))
			_ = bar.Set64(p.Step)
			return
		}
		if time.Since(lastLog) >= 10*time.Second || p.Step == p.Steps {
			lastLog = time.Now()
			log.Info().Int("epoch", p.Epoch).Int64("step", p.Step).Int64("steps", p.Steps).Float64("loss", p.Loss).
				Float64("lr", p.LR).Float64("grad_norm", p.GradNorm).Dur("elapsed", p.Elapsed).Msg("sft")
		}
	}
	w := c.App.Writer
	// the adapter, or with --full the new base model
	writeAdapter := func(steps int64, loss float64) error {
		meta := map[string]string{
			"empo2.sft.data":       c.String(sftDataFlag.Name),
			"empo2.sft.steps":      strconv.FormatInt(steps, 10),
			"empo2.sft.train_loss": strconv.FormatFloat(loss, 'g', 6, 64),
		}
		if full {
			return policy.SaveFull(out, meta)
		}
		a, err := lu.Adapter()
		if err != nil {
			return err
		}
		for k, v := range meta {
			a.Meta[k] = v
		}
		return a.Write(out, gguf.TypeF32)
	}
	cfg.EpochDone = func(e sft.Epoch) {
		if bar != nil {
			bar.Clear()
		}
		// the adapter of every finished epoch, so it can be evaluated while training goes on
		if err := writeAdapter(step(), e.TrainLoss); err != nil {
			log.Error().Err(err).Str("out", out).Msg("writing the epoch's output")
		}
		if c.Bool(sftJSONFlag.Name) {
			type ej struct {
				Epoch     int      `json:"epoch"`
				TrainLoss float64  `json:"train_loss"`
				ValLoss   *float64 `json:"val_loss,omitempty"`
				Tokens    int      `json:"trained_tokens"`
				Seconds   float64  `json:"seconds"`
			}
			o := ej{Epoch: e.Epoch, TrainLoss: e.TrainLoss, Tokens: e.Tokens, Seconds: e.Elapsed.Seconds()}
			if !math.IsNaN(e.ValLoss) {
				v := e.ValLoss
				o.ValLoss = &v
			}
			_ = json.NewEncoder(w).Encode(o)
			return
		}
		val := "-"
		if !math.IsNaN(e.ValLoss) {
			val = strconv.FormatFloat(e.ValLoss, 'f', 4, 64)
		}
		fmt.Fprintf(w, "epoch %d: train loss %.4f, val loss %s, %d trained tokens, %s\n", e.Epoch, e.TrainLoss, val, e.Tokens, e.Elapsed.Round(time.Second))
	}
	var ev sft.Evaluator = policy
	res, err := sft.Train(u, ev, train, val, cfg)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return err
	}
	loss := math.NaN()
	if n := len(res.Epochs); n > 0 {
		loss = res.Epochs[n-1].TrainLoss
	}
	if err := writeAdapter(res.Steps, loss); err != nil {
		return err
	}
	if full {
		fmt.Fprintf(w, "wrote %s (full model, every weight trained, %d steps); checkpoint %s\n", out, res.Steps, cfg.Checkpoint)
		return nil
	}
	fmt.Fprintf(w, "wrote %s (rank %d, alpha %g, %d steps); checkpoint %s\n", out, rank, alpha, res.Steps, cfg.Checkpoint)
	return nil
}

// trimExt drops a ".gguf" extension.
func trimExt(p string) string {
	if len(p) > 5 && p[len(p)-5:] == ".gguf" {
		return p[:len(p)-5]
	}
	return p
}
