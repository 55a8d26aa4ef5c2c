package main

// `empo2 check …`: the developer commands of the GPU verification
// (gpucheck/, run by scripts/gpu-check.sh; docs/gpu.md). Hidden from
// the main help.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/gpucheck"
	"github.com/empo2/empo2/internal/safefile"
)

var (
	checkModelFlag   = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "model GGUF `FILE`", Required: true}
	checkOutFlag     = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "result JSON `FILE`", Required: true}
	checkThreadsFlag = &cli.IntFlag{Name: "threads", Usage: "CPU threads", DefaultText: "all cores"}
	checkLayersFlag  = &cli.IntFlag{Name: "gpu-layers", Usage: "layers llama.cpp offloads to a GPU backend (-1: all)"}
	checkSeedFlag    = &cli.Int64Flag{Name: "seed", Usage: "seed of the batch and the LoRA weights", Value: 1}
)

func init() {
	register(&cli.Command{
		Name:   "check",
		Usage:  "developer checks of a GPU backend against the CPU (docs/gpu.md; run by scripts/gpu-check.sh)",
		Hidden: true,
		Subcommands: []*cli.Command{
			{
				Name:  "rollout",
				Usage: "greedy generation, single and batched; compared with a --reference run (the CPU's)",
				Flags: []cli.Flag{checkModelFlag, checkOutFlag, checkThreadsFlag, checkLayersFlag,
					&cli.IntFlag{Name: "max-tokens", Usage: "tokens generated per prompt", Value: 24},
					&cli.StringFlag{Name: "reference", Usage: "result `FILE` of the reference run to compare with"},
					&cli.StringFlag{Name: "noise-model", Usage: "the same weights in higher precision (F32 twin of an F16 model): its log-prob differences are the noise floor a device run is held to"},
					&cli.Float64Flag{Name: "tol", Usage: "max |Δ log-prob| against the reference (replaced by the reference's noise floor when it has one)", Value: 1e-3},
					&cli.StringFlag{Name: "kv-type", Usage: "KV cache element type: f32 or f16", Value: "f32"},
					&cli.StringFlag{Name: "flash-attn", Usage: "llama.cpp's flash attention: off, on or auto", Value: "off"},
					forceFlag,
				},
				Action: checkRolloutAction,
			},
			{
				Name:  "train",
				Usage: "the LoRA training graph on --device against the CPU: log-probs, LoRA gradients, scheduler splits and CPU fallbacks",
				Flags: []cli.Flag{checkModelFlag, checkOutFlag, checkThreadsFlag, checkSeedFlag,
					&cli.StringFlag{Name: "device", Usage: "engine under test: gpu, auto or cpu", Value: "gpu"},
					&cli.BoolFlag{Name: "shared", Usage: "also check the engine built on llama.cpp's offloaded weights (LoadShared, as empo2 train)"},
					&cli.IntFlag{Name: "rank", Usage: "LoRA rank (all targets, alpha 2·rank)", Value: 8},
					&cli.Float64Flag{Name: "logprob-tol", Usage: "max |Δ log-prob|", Value: 1e-4},
					&cli.Float64Flag{Name: "grad-tol", Usage: "max ‖Δg‖/‖g‖ per LoRA tensor", Value: 1e-3},
					&cli.StringFlag{Name: "dump", Usage: "`DIR` for adapter.gguf and hf-check.json (scripts/gpu_hf_check.py)"},
					&cli.BoolFlag{Name: "compare-nodes", Usage: "also compare every node of the forward and training graphs with the CPU's, computed node by node and in one go (docs/gpu.md)"},
					&cli.Float64Flag{Name: "node-tol", Usage: "with --compare-nodes: max ‖Δ‖/‖ref‖ per node", Value: 1e-2},
					forceFlag,
				},
				Action: checkTrainAction,
			},
			{
				Name:  "bench",
				Usage: "rollout tokens/s and LoRA training steps in one process (the model loaded once)",
				Flags: []cli.Flag{checkModelFlag, checkOutFlag, checkThreadsFlag, checkLayersFlag, checkSeedFlag,
					&cli.StringFlag{Name: "batches", Usage: "rollout batch sizes, comma-separated", Value: "1,8,64"},
					&cli.IntFlag{Name: "gen-tokens", Usage: "tokens generated per sequence", Value: 64},
					&cli.IntFlag{Name: "prompt-tokens", Usage: "random prompt tokens", Value: 64},
					&cli.IntFlag{Name: "train-seqs", Usage: "sequences per training step", Value: 16},
					&cli.IntFlag{Name: "train-len", Usage: "tokens per training sequence", Value: 512},
					&cli.IntFlag{Name: "rank", Usage: "LoRA rank (all targets)", Value: 8},
					&cli.IntFlag{Name: "micro-tokens", Usage: "padded tokens per training graph (0: the engine's default)"},
					&cli.BoolFlag{Name: "transpose-in-graph", Usage: "no stored transposed weight copies (less memory)"},
					&cli.IntFlag{Name: "steps", Usage: "timed training steps", Value: 2},
					forceFlag,
				},
				Action: checkBenchAction,
			},
			{
				Name:      "report",
				Usage:     "gather a gpu-check work folder into gpu-report.json and gpu-report.md",
				ArgsUsage: "WORKDIR OUTDIR",
				Flags:     []cli.Flag{forceFlag},
				Action:    checkReportAction,
			},
		},
	})
}

// finishCheck writes a check's result (when there is one: a failed
// comparison has one, a failure to run has none) and returns err, so that a
// mismatch exits non-zero after its result is on disk.
func finishCheck[T any](c *cli.Context, res *T, err error) error {
	if res != nil {
		if werr := gpucheck.WriteJSON(c.String(checkOutFlag.Name), res); werr != nil {
			return errors.Join(err, werr)
		}
		log.Info().Str("out", c.String(checkOutFlag.Name)).Msg("check result written")
	}
	return err
}

// checkOutputs refuses an --out (or --dump's files) that would replace an
// input, and, unless --force, one that exists (safefile.CheckWrite, as every
// writing command).
func checkOutputs(c *cli.Context, outputs []safefile.Path, inputFlags ...string) error {
	outputs = append(outputs, safefile.Path{Flag: "--out", Path: c.String(checkOutFlag.Name)})
	var in []safefile.Path
	for _, f := range inputFlags {
		in = append(in, safefile.Path{Flag: "--" + f, Path: c.String(f)})
	}
	return safefile.CheckWrite(outputs, in, c.Bool(forceFlag.Name))
}

func checkRolloutAction(c *cli.Context) error {
	if err := checkOutputs(c, nil, "model", "reference", "noise-model"); err != nil {
		return err
	}
	cfg := gpucheck.RolloutConfig{Model: c.String(checkModelFlag.Name), GPULayers: c.Int(checkLayersFlag.Name),
		Threads: c.Int(checkThreadsFlag.Name), MaxTokens: c.Int("max-tokens"), NoiseModel: c.String("noise-model"), Tol: c.Float64("tol"),
		KVType: c.String("kv-type"), FlashAttn: c.String("flash-attn")}
	if p := c.String("reference"); p != "" {
		cfg.Reference = &gpucheck.RolloutResult{}
		if err := gpucheck.ReadJSON(p, cfg.Reference); err != nil {
			return fmt.Errorf("--reference: %w", err)
		}
	}
	res, err := gpucheck.Rollouts(c.Context, cfg)
	return finishCheck(c, res, err)
}

func checkTrainAction(c *cli.Context) error {
	dump := safefile.Path{Flag: "--dump", Path: c.String("dump"), Dir: true, Files: []string{"adapter.gguf", "hf-check.json"}}
	if err := checkOutputs(c, []safefile.Path{dump}, "model"); err != nil {
		return err
	}
	res, err := gpucheck.Train(gpucheck.TrainConfig{Model: c.String(checkModelFlag.Name), Device: c.String("device"),
		Threads: c.Int(checkThreadsFlag.Name), Rank: c.Int("rank"), Seed: c.Int64(checkSeedFlag.Name), Shared: c.Bool("shared"),
		LogpTol: c.Float64("logprob-tol"), GradTol: c.Float64("grad-tol"), Dump: c.String("dump"),
		CompareNodes: c.Bool("compare-nodes"), NodeTol: c.Float64("node-tol")})
	return finishCheck(c, res, err)
}

func checkBenchAction(c *cli.Context) error {
	if err := checkOutputs(c, nil, "model"); err != nil {
		return err
	}
	var batches []int
	for _, s := range strings.Split(c.String("batches"), ",") {
		b, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--batches %q: %w", c.String("batches"), err)
		}
		batches = append(batches, b)
	}
	out := c.String(checkOutFlag.Name)
	res, err := gpucheck.Bench(c.Context, gpucheck.BenchConfig{Model: c.String(checkModelFlag.Name), GPULayers: c.Int(checkLayersFlag.Name),
		Threads: c.Int(checkThreadsFlag.Name), Batches: batches, GenTokens: c.Int("gen-tokens"), PromptTokens: c.Int("prompt-tokens"),
		TrainSeqs: c.Int("train-seqs"), TrainLen: c.Int("train-len"), Rank: c.Int("rank"), MicroTokens: c.Int("micro-tokens"),
		TransposeInGraph: c.Bool("transpose-in-graph"), Steps: c.Int("steps"), Seed: c.Int64(checkSeedFlag.Name)},
		func(r *gpucheck.BenchResult) {
			if err := gpucheck.WriteJSON(out, r); err != nil {
				log.Warn().Err(err).Msg("writing partial benchmark")
			}
		})
	return finishCheck(c, res, err)
}

func checkReportAction(c *cli.Context) error {
	if c.NArg() != 2 {
		return fmt.Errorf("usage: empo2 check report [--force] WORKDIR OUTDIR")
	}
	work, out := c.Args().Get(0), c.Args().Get(1)
	if err := safefile.CheckWrite([]safefile.Path{{Flag: "OUTDIR", Path: out, Dir: true, Files: []string{gpucheck.ReportJSON, gpucheck.ReportMD}}},
		[]safefile.Path{{Flag: "WORKDIR", Path: work, Dir: true, Files: []string{"meta.json"}}}, c.Bool(forceFlag.Name)); err != nil {
		return err
	}
	doc, err := gpucheck.WriteReport(work, out)
	if err != nil {
		return err
	}
	log.Debug().Int("phases", len(doc.Phases)).Bool("pass", doc.Pass).Msg("report written")
	return nil
}
