package main

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/statefile"
)

var (
	exportModelFlag = &cli.StringFlag{
		Name:     "model",
		Aliases:  []string{"m"},
		Usage:    "base model GGUF the adapter was trained on",
		Required: true,
	}
	exportLoraFlag = &cli.StringFlag{
		Name:     "lora",
		Usage:    "adapter GGUF, or a training-state file (its adapter is exported)",
		Required: true,
	}
	exportOutFlag = &cli.StringFlag{
		Name:     "out",
		Aliases:  []string{"o"},
		Usage:    "GGUF to write",
		Required: true,
	}
	exportMergedFlag = &cli.BoolFlag{
		Name:  "merged",
		Usage: "write a full model with W + (alpha/r)·B·A merged into every adapted weight",
	}
	exportTypeFlag = &cli.StringFlag{
		Name:        "dtype",
		Aliases:     []string{"type"}, // the old spelling
		Usage:       "tensor type of the written adapter tensors, or of the merged weights with --merged: f32 or f16 (--format peft|hf: also bf16)",
		DefaultText: "f32 for an adapter; with --merged each weight keeps its base type (F32, F16; BF16 becomes F32)",
	}
)

func init() {
	register(&cli.Command{
		Name:  "export",
		Usage: "validate and copy an adapter in llama.cpp's format, or merge it into a full GGUF",
		Description: "Examples:\n" +
			"   empo2 export --model base.gguf --lora run/state.gguf --out adapter.gguf\n" +
			"   empo2 export --model base.gguf --lora adapter.gguf --merged --out merged.gguf\n\n" +
			"The adapter loads in llama.cpp tools with --lora adapter.gguf; the merged file\n" +
			"replaces the base model and needs no adapter.",
		Flags:  []cli.Flag{exportModelFlag, exportLoraFlag, exportOutFlag, exportMergedFlag, exportTypeFlag, exportFormatFlag, exportHFBaseFlag, exportHFTokenizerFlag, forceFlag},
		Action: exportAction,
	})
}

// readAdapterOrState reads an adapter file, or the adapter inside a
// training-state file.
func readAdapterOrState(path string) (*lora.Adapter, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading adapter: %w", err)
	}
	defer f.Close()
	opt := lora.ReadOptions{}
	if gt, _ := f.String(lora.KeyGeneralType); gt == statefile.GeneralType {
		// A state file holds the adapter plus AdamW moments (package statefile).
		opt = lora.ReadOptions{GeneralType: statefile.GeneralType, Skip: statefile.IsMoment}
	}
	a, err := lora.FromGGUFWith(f, opt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for k := range a.Meta {
		if strings.HasPrefix(k, "empo2.") {
			delete(a.Meta, k) // training bookkeeping stays out of exported adapters
		}
	}
	return a, nil
}

// exportInputs are the files export reads, for the output guard.
func exportInputs(modelPath, loraPath string) []safefile.Path {
	return []safefile.Path{{Flag: "--model", Path: modelPath}, {Flag: "--lora", Path: loraPath}}
}

func exportAction(c *cli.Context) error {
	if f := c.String(exportFormatFlag.Name); f != "gguf" {
		return exportHF(c, f) // export_hf.go: Hugging Face PEFT / transformers folders
	}
	typ := lora.KeepType // --merged: each weight keeps its base type
	if c.IsSet(exportTypeFlag.Name) || !c.Bool(exportMergedFlag.Name) {
		name := c.String(exportTypeFlag.Name)
		if !c.IsSet(exportTypeFlag.Name) {
			name = "f32"
		}
		var err error
		if typ, err = parseTensorType(name); err != nil {
			return err
		}
	}
	modelPath, loraPath, out := c.String(exportModelFlag.Name), c.String(exportLoraFlag.Name), c.String(exportOutFlag.Name)
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "--out", Path: out}}, exportInputs(modelPath, loraPath)); err != nil {
		return err
	}
	if err := checkNew(c, safefile.Path{Flag: "--out", Path: out}); err != nil {
		return err
	}
	base, a, err := openBaseAndAdapter(modelPath, loraPath)
	if err != nil {
		return err
	}
	defer base.Close()
	if c.Bool(exportMergedFlag.Name) {
		if err := lora.Merge(base, a, out, typ); err != nil {
			return err
		}
		log.Info().Str("out", out).Int("merged", len(a.Pairs)).Str("rank", rankText(a)).Msg("wrote merged model")
		return nil
	}
	if err := a.Write(out, typ); err != nil {
		return err
	}
	log.Info().Str("out", out).Int("pairs", len(a.Pairs)).Str("rank", rankText(a)).Msg("wrote adapter")
	return nil
}

// openBaseAndAdapter opens the base GGUF and reads the adapter (or training
// state) at loraPath, checked against it. The caller closes base.
func openBaseAndAdapter(modelPath, loraPath string) (*gguf.File, *lora.Adapter, error) {
	base, err := gguf.Open(modelPath)
	if err != nil {
		return nil, nil, fmt.Errorf("reading base model: %w", err)
	}
	a, err := readAdapterOrState(loraPath)
	if err == nil {
		if err = lora.Validate(a, base); err != nil {
			err = fmt.Errorf("%s does not fit %s: %w", loraPath, modelPath, err)
		}
	}
	if err != nil {
		base.Close()
		return nil, nil, err
	}
	return base, a, nil
}
