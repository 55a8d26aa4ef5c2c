package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/trainer/sft"
)

// `empo2 sft`: supervised fine-tuning of a LoRA adapter on chat JSONL, or
// with --full of every weight of a small F32 model (docs/sft.md).

// Flags of `empo2 sft`: shortcuts for keys of sft.RunConfig (docs/sft.md);
// the defaults are the configuration's.
var (
	sftDef         = sft.DefaultRunConfig()
	sftModelFlag   = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "base model GGUF `FILE`, Qwen2 architecture (model; required)"}
	sftDataFlag    = &cli.StringFlag{Name: "data", Usage: "training chats, JSONL `FILE`, {\"messages\":[{\"role\",\"content\"}…]} per line (data; required)"}
	sftValFlag     = &cli.StringFlag{Name: "val", Usage: "validation chats, JSONL `FILE`: loss after every epoch (val)"}
	sftOutFlag     = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "adapter GGUF `FILE` to write; with --full the new base model GGUF (out; required)"}
	sftRankFlag    = &cli.IntFlag{Name: "rank", Usage: "LoRA rank (lora.rank)", DefaultText: strconv.Itoa(sftDef.LoRA.Rank)}
	sftAlphaFlag   = &cli.Float64Flag{Name: "alpha", Usage: "LoRA alpha, scale alpha/rank (lora.alpha)", DefaultText: "2·rank"}
	sftTargetsFlag = &cli.StringSliceFlag{Name: "targets", Usage: "LoRA targets, comma-separated: q,k,v,o,gate,up,down (lora.targets)", DefaultText: strings.Join(sftDef.LoRA.Targets, ",")}
	sftEpochsFlag  = &cli.IntFlag{Name: "epochs", Usage: "passes over the data (epochs)", DefaultText: strconv.Itoa(sftDef.Epochs)}
	sftLRFlag      = &cli.Float64Flag{Name: "lr", Usage: "peak learning rate, AdamW with cosine decay (lr)", DefaultText: yamlFloat(sftDef.LR)}
	sftMinLRFlag   = &cli.Float64Flag{Name: "min-lr", Usage: "final learning rate of the cosine schedule (min_lr)", DefaultText: yamlFloat(sftDef.MinLR)}
	sftWarmupFlag  = &cli.IntFlag{Name: "warmup", Usage: "linear warmup steps (warmup)", DefaultText: strconv.Itoa(sftDef.Warmup)}
	sftWDFlag      = &cli.Float64Flag{Name: "weight-decay", Usage: "AdamW decoupled weight decay (weight_decay)", DefaultText: yamlFloat(sftDef.WeightDecay)}
	sftClipFlag    = &cli.Float64Flag{Name: "clip", Usage: "global gradient-norm clip, 0: off (max_grad_norm)", DefaultText: yamlFloat(sftDef.MaxGradNorm)}
	sftBatchFlag   = &cli.IntFlag{Name: "batch-tokens", Usage: "tokens per optimizer step, packed sequences with context (batch_tokens)", DefaultText: strconv.Itoa(sftDef.BatchTokens)}
	sftMaxLenFlag  = &cli.IntFlag{Name: "max-len", Usage: "packing length and per-record cut in tokens (max_len)", DefaultText: "the model's context"}
	sftNoPackFlag  = &cli.BoolFlag{Name: "no-pack", Usage: "one record per sequence, no packing (pack: false)"}
	sftSeedFlag    = &cli.Int64Flag{Name: "seed", Usage: "seed of the shuffling and the LoRA init (seed)", DefaultText: strconv.FormatInt(sftDef.Seed, 10)}
	sftCkptFlag    = &cli.StringFlag{Name: "checkpoint", Usage: "training-state `FILE` (checkpoint)", DefaultText: "OUT with .state.gguf"}
	sftSaveFlag    = &cli.IntFlag{Name: "save-every", Usage: "write the checkpoint every `N` steps, and after every epoch (save_every)", DefaultText: strconv.Itoa(sftDef.SaveEvery)}
	sftResumeFlag  = &cli.BoolFlag{Name: "resume", Usage: "continue from the checkpoint if it exists: same data, seed and packing (resume)"}
	sftInitFlag    = &cli.StringFlag{Name: "init", Usage: "start from this adapter GGUF `FILE` instead of a fresh one: same rank, alpha, targets and base model (lora.init; not with --full: pass the model to continue from as -m)"}
	sftFullFlag    = &cli.BoolFlag{Name: "full", Usage: "train every weight of an F32 model (embeddings, norms, head too) and write OUT as a new base GGUF; memory: 4× the model in F32 (weights, gradients, 2 AdamW moments) + activations; the lora keys do not apply (full)"}
	sftJSONFlag    = &cli.BoolFlag{Name: "json", Usage: "print the epoch summaries as JSON lines"}
	sftMicroFlag   = &cli.IntFlag{Name: "micro-tokens", Usage: "padded tokens per forward/backward call, the memory bound (micro_tokens)", DefaultText: "max-len"}
)

// sftShortcuts are the flags of `sft` and the keys they set (--no-pack,
// which inverts pack, aside).
var sftShortcuts = []shortcut{
	{sftModelFlag, "model"}, {sftDataFlag, "data"}, {sftValFlag, "val"}, {sftOutFlag, "out"}, {sftRankFlag, "lora.rank"},
	{sftAlphaFlag, "lora.alpha"}, {sftTargetsFlag, "lora.targets"}, {sftEpochsFlag, "epochs"}, {sftLRFlag, "lr"}, {sftMinLRFlag, "min_lr"},
	{sftWarmupFlag, "warmup"}, {sftWDFlag, "weight_decay"}, {sftClipFlag, "max_grad_norm"}, {sftBatchFlag, "batch_tokens"},
	{sftMaxLenFlag, "max_len"}, {sftSeedFlag, "seed"}, {sftCkptFlag, "checkpoint"}, {sftSaveFlag, "save_every"}, {sftResumeFlag, "resume"},
	{sftInitFlag, "lora.init"}, {llmThreadsFlag, "threads"}, {sftFullFlag, "full"}, {sftMicroFlag, "micro_tokens"},
}

func init() {
	register(&cli.Command{
		Name:  "sft",
		Usage: "supervised fine-tuning of a LoRA adapter (or, --full, of every weight) on chat JSONL (loss on assistant tokens only)",
		Description: "Tokenizes every chat exactly as the rollouts do (rollout.Renderer), packs them up to max_len,\n" +
			"shuffles with seed, and trains cross-entropy on the assistant tokens (contents and end-of-turn\n" +
			"tokens) with AdamW. Writes OUT (a LoRA adapter; with --full a new base GGUF holding every trained\n" +
			"weight, for F32 models only) and a resumable checkpoint. Data: `empo2 env demos` or your own\n" +
			"{\"messages\":[…]} lines. Every key (docs/sft.md) can come from --config FILE and --set KEY=VALUE;\n" +
			"the flags are shortcuts. Subcommand `sft eval` plays episodes greedily.",
		Flags: append(configFlags("SFT"), sftModelFlag, sftDataFlag, sftValFlag, sftOutFlag, sftRankFlag,
			sftAlphaFlag, sftTargetsFlag, sftEpochsFlag, sftLRFlag, sftMinLRFlag, sftWarmupFlag, sftWDFlag, sftClipFlag, sftBatchFlag,
			sftMaxLenFlag, sftNoPackFlag, sftSeedFlag, sftCkptFlag, sftSaveFlag, sftResumeFlag, sftInitFlag, llmThreadsFlag, sftFullFlag,
			sftJSONFlag, sftMicroFlag, forceFlag),
		Action:      sftAction,
		Subcommands: []*cli.Command{sftEvalCommand()},
	})
}

// sftConfig resolves sft's configuration: defaults, --config, --set, then
// the shortcut flags.
func sftConfig(c *cli.Context) (sft.RunConfig, error) {
	sets := overrides(c, sftShortcuts)
	if c.IsSet(sftNoPackFlag.Name) {
		sets = append(sets, "pack="+strconv.FormatBool(!c.Bool(sftNoPackFlag.Name)))
	}
	cfg, err := sft.LoadRunConfig(configFile(c), sets)
	cfg.ConfigFile, cfg.Force = configFile(c), c.Bool(forceFlag.Name)
	return cfg, err
}

func sftAction(c *cli.Context) error {
	if err := checkThreads(c); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return fmt.Errorf("sft takes no arguments, got %q (use --data FILE)", c.Args().Slice())
	}
	cfg, err := sftConfig(c)
	if err != nil {
		return err
	}
	if printConfig(c) {
		return sft.PrintRunConfig(c.App.Writer, cfg)
	}
	cfg.Warn = func(msg string) { log.Warn().Msg(msg) }
	cfg.OnData = func(d sft.DataInfo) {
		log.Info().Int("records", d.Records).Int("tokens", d.Tokens).Int("trained_tokens", d.Trained).
			Int("truncated", d.Truncated).Int("dropped", d.Dropped).Int("val_records", d.ValRecords).
			Int64("steps", d.Steps).Int("max_len", d.MaxLen).Int("threads", d.Threads).Bool("full", d.Full).Msg("sft data")
		if d.Full {
			log.Info().Int("tensors", d.Tensors).Int64("state_bytes", d.StateBytes).
				Msg("full SFT: weights, gradients and AdamW moments on the backend")
		}
	}
	pl := newProgressLine("") // the bar's line: steps of this invocation, trained tokens/s, ETA (internal/watch)
	lastLog := time.Now()
	var lastStep int64
	started := false
	cfg.Progress = func(p sft.Progress) {
		if !started { // the first step of this invocation (a resumed run starts later)
			started, lastStep = true, p.Step-1
			pl.phase(watch.SFT, int(p.Steps-lastStep))
		}
		pl.meter.Tokens(p.Tokens)
		pl.meter.Add(int(p.Step - lastStep))
		lastStep = p.Step
		if pl.tty {
			pl.setSuffix(fmt.Sprintf("epoch %d/%d loss %.4f", p.Epoch, p.Epochs, p.Loss))
			return
		}
		if time.Since(lastLog) >= 10*time.Second || p.Step == p.Steps {
			lastLog = time.Now()
			log.Info().Int("epoch", p.Epoch).Int64("step", p.Step).Int64("steps", p.Steps).Float64("loss", p.Loss).
				Float64("lr", p.LR).Float64("grad_norm", p.GradNorm).Str("elapsed", logDur(p.Elapsed)).Msg("sft")
		}
	}
	w := c.App.Writer
	cfg.EpochDone = func(e sft.Epoch) {
		pl.clear()
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
	ctx, sig := interruptible(c)
	defer sig.stop()
	res, err := sft.Run(ctx, cfg)
	pl.finish(err == nil)
	if err != nil {
		if sig.caught() && errors.Is(err, sft.ErrInterrupted) {
			return sig.interrupted(fmt.Sprintf("sft interrupted after step %d: checkpoint %s; continue with --resume", lastStep, res.Checkpoint))
		}
		return err
	}
	if res.Full {
		fmt.Fprintf(w, "wrote %s (full model, every weight trained, %d steps); checkpoint %s\n", res.Out, res.Steps, res.Checkpoint)
		return nil
	}
	fmt.Fprintf(w, "wrote %s (rank %d, alpha %g, %d steps); checkpoint %s\n", res.Out, res.Rank, res.Alpha, res.Steps, res.Checkpoint)
	return nil
}
