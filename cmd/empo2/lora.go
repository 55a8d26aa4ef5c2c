package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/lora"
)

var (
	loraModelFlag = &cli.StringFlag{
		Name:     "model",
		Aliases:  []string{"m"},
		Usage:    "base model GGUF (Qwen2 family)",
		Required: true,
	}
	loraRankFlag = &cli.IntFlag{
		Name:  "rank",
		Usage: "LoRA rank r",
		Value: 8,
	}
	loraAlphaFlag = &cli.Float64Flag{
		Name:  "alpha",
		Usage: "LoRA alpha; llama.cpp scales B·A by alpha/rank",
		Value: 16,
	}
	loraOutFlag = &cli.StringFlag{
		Name:     "out",
		Aliases:  []string{"o"},
		Usage:    "adapter GGUF to write (llama.cpp format)",
		Required: true,
	}
	loraSeedFlag = &cli.Uint64Flag{
		Name:  "seed",
		Usage: "seed of the random initialisation of A (and B with --random-b)",
		Value: 0,
	}
	loraRandomBFlag = &cli.BoolFlag{
		Name:  "random-b",
		Usage: "initialise B uniform in ±1/√r instead of zero (the adapter then changes the model; for tests)",
	}
	loraTargetsFlag = &cli.StringFlag{
		Name:  "targets",
		Usage: "comma-separated projections to adapt: q,k,v,o,gate,up,down",
		Value: strings.Join(lora.DefaultTargets, ","),
	}
	loraTypeFlag = &cli.StringFlag{
		Name:    "dtype",
		Aliases: []string{"type"}, // the old spelling
		Usage:   "tensor type of the adapter file: f32 or f16",
		Value:   "f32",
	}
	loraValidateModelFlag = &cli.StringFlag{
		Name:     "model",
		Aliases:  []string{"m"},
		Usage:    "base model GGUF",
		Required: true,
	}
	loraFileFlag = &cli.StringFlag{
		Name:     "lora",
		Usage:    "adapter GGUF to check",
		Required: true,
	}
)

func init() {
	register(&cli.Command{
		Name:  "lora",
		Usage: "create and check LoRA adapters in llama.cpp's adapter format",
		Subcommands: []*cli.Command{
			{
				Name:  "init",
				Usage: "write a fresh adapter for a base model (A Kaiming-uniform as PEFT, B zero)",
				Description: "Example:\n   empo2 lora init --model qwen2.5-0.5b-instruct-f32.gguf --rank 8 --alpha 16 --out adapter.gguf\n\n" +
					"The file loads in any llama.cpp tool (llama-cli --lora adapter.gguf).",
				Flags:  []cli.Flag{loraModelFlag, loraRankFlag, loraAlphaFlag, loraOutFlag, loraSeedFlag, loraRandomBFlag, loraTargetsFlag, loraTypeFlag, forceFlag},
				Action: loraInit,
			},
			{
				Name:        "validate",
				Usage:       "check an adapter against a base model as llama.cpp's loader does (plus finite values)",
				Description: "Example:\n   empo2 lora validate --model base.gguf --lora adapter.gguf",
				Flags:       []cli.Flag{loraValidateModelFlag, loraFileFlag},
				Action:      loraValidate,
			},
			loraImportCommand, // lora_import.go
		},
	})
}

// parseTensorType maps --type to a gguf type.
func parseTensorType(s string) (gguf.GGMLType, error) {
	switch strings.ToLower(s) {
	case "f32":
		return gguf.TypeF32, nil
	case "f16":
		return gguf.TypeF16, nil
	}
	return 0, fmt.Errorf("--dtype %q: want f32 or f16", s)
}

func loraInit(c *cli.Context) error {
	typ, err := parseTensorType(c.String(loraTypeFlag.Name))
	if err != nil {
		return err
	}
	if c.IsSet(loraTargetsFlag.Name) && strings.TrimSpace(c.String(loraTargetsFlag.Name)) == "" {
		return fmt.Errorf("--targets is empty: name some of q,k,v,o,gate,up,down (or leave the flag out for all)")
	}
	targets, err := lora.ParseTargets(c.String(loraTargetsFlag.Name))
	if err != nil {
		return err
	}
	modelPath, out := c.String(loraModelFlag.Name), c.String(loraOutFlag.Name)
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "--out", Path: out}}, []safefile.Path{{Flag: "--model", Path: modelPath}}); err != nil {
		return err
	}
	if err := checkNew(c, safefile.Path{Flag: "--out", Path: out}); err != nil {
		return err
	}
	base, err := gguf.Open(modelPath)
	if err != nil {
		return fmt.Errorf("reading base model: %w", err)
	}
	defer base.Close()
	// The training graph (package cgo) and its parameter layout are Qwen2
	// only; an adapter for another architecture could never be trained.
	if gt, _ := base.String(lora.KeyGeneralType); gt != "adapter" {
		if arch, _ := base.String(lora.KeyArchitecture); arch != "qwen2" {
			return fmt.Errorf("%s: architecture %q is not supported (empo2 trains qwen2 models only)", modelPath, arch)
		}
	}
	a, err := lora.Init(base, lora.InitConfig{
		Rank:    c.Int(loraRankFlag.Name),
		Alpha:   float32(c.Float64(loraAlphaFlag.Name)),
		Targets: targets,
		Seed:    c.Uint64(loraSeedFlag.Name),
		RandomB: c.Bool(loraRandomBFlag.Name),
	})
	if err != nil {
		return fmt.Errorf("%s: %w", modelPath, err)
	}
	if err := a.Write(out, typ); err != nil {
		return err
	}
	params := 0
	for _, p := range a.Pairs {
		params += len(p.A) + len(p.B)
	}
	log.Info().Str("out", out).Str("arch", a.Arch).Str("rank", rankText(a)).Float32("alpha", a.Alpha).
		Int("tensors", 2*len(a.Pairs)).Int("params", params).Msg("wrote LoRA adapter")
	return nil
}

func loraValidate(c *cli.Context) error {
	a, err := lora.ValidateFiles(c.String(loraFileFlag.Name), c.String(loraValidateModelFlag.Name))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "ok: %d LoRA pairs, rank %s, alpha %g, architecture %s\n",
		len(a.Pairs), rankText(a), a.Alpha, a.Arch)
	return nil
}

// rankText is the adapter's rank, or its range when the pairs differ
// ("4-8 (varies per tensor)"); Adapter.Rank is 0 then.
func rankText(a *lora.Adapter) string {
	lo, hi := 0, 0
	for i, p := range a.Pairs {
		if i == 0 || p.Rank < lo {
			lo = p.Rank
		}
		if p.Rank > hi {
			hi = p.Rank
		}
	}
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d-%d (varies per tensor)", lo, hi)
}
