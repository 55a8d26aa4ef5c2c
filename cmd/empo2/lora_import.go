package main

// `empo2 lora import`: a PEFT LoRA (adapter_model.safetensors +
// adapter_config.json) to a llama.cpp adapter GGUF (lora/peft.go).

import (
	"fmt"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/lora"
)

var loraImportCommand = &cli.Command{
	Name:      "import",
	Usage:     "convert a Hugging Face PEFT LoRA (adapter_model.safetensors + adapter_config.json) to a llama.cpp adapter GGUF",
	ArgsUsage: "PEFT_DIR (or its adapter_model.safetensors)",
	Description: "Example:\n   empo2 lora import --model base.gguf --out adapter.gguf peft-adapter/\n\n" +
		"The base model is the GGUF of the model the adapter was trained on (Qwen2 family);\n" +
		"the adapter is checked against it as llama.cpp's loader does. Tensors are copied\n" +
		"unchanged (PEFT's lora_A [r, in] and lora_B [out, r] are llama.cpp's lora_a and\n" +
		"lora_b); lora_alpha becomes adapter.lora.alpha. DoRA, trained biases and\n" +
		"modules_to_save have no llama.cpp LoRA form and are refused.",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "base model GGUF the adapter belongs to", Required: true},
		&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "adapter GGUF to write", Required: true},
		&cli.StringFlag{Name: "dtype", Aliases: []string{"type"}, Usage: "tensor type of the written adapter: f32 or f16", Value: "f32"},
		forceFlag,
	},
	Action: loraImport,
}

func loraImport(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("lora import: want one argument, the PEFT adapter folder (got %d)", c.NArg())
	}
	typ, err := parseTensorType(c.String("dtype"))
	if err != nil {
		return err
	}
	in, modelPath, out := c.Args().First(), c.String("model"), c.String("out")
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "--out", Path: out}},
		[]safefile.Path{{Flag: "--model", Path: modelPath}, {Flag: "PEFT_DIR", Path: in, Dir: true, Files: lora.PEFTFiles}}); err != nil {
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
	start := time.Now()
	a, notes, err := lora.ImportPEFT(in, base)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	for _, n := range notes {
		log.Warn().Msg(n)
	}
	if err := a.Write(out, typ); err != nil {
		return err
	}
	log.Info().Str("out", out).Int("pairs", len(a.Pairs)).Int("rank", a.Rank()).Float32("alpha", a.Alpha).
		Str("took", time.Since(start).Round(time.Millisecond).String()).Msg("wrote LoRA adapter")
	return nil
}
