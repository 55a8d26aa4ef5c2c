package main

// `empo2 export --format peft|hf`: the Hugging Face side of export (lora/peft.go,
// lora/hf.go). export.go dispatches here for every format but gguf.

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/safetensors"
)

var (
	exportFormatFlag = &cli.StringFlag{
		Name: "format",
		Usage: "gguf: llama.cpp adapter (or merged model with --merged); " +
			"peft: Hugging Face PEFT LoRA folder (adapter_model.safetensors + adapter_config.json); " +
			"hf: with --merged, a transformers Qwen2ForCausalLM folder (config, safetensors, tokenizer). " +
			"For peft and hf, --out is a directory",
		Value: "gguf",
	}
	exportHFTokenizerFlag = &cli.StringFlag{
		Name: "tokenizer",
		Usage: "with --format hf: the Hugging Face tokenizer `DIR` the base model's vocabulary came from (e.g. the folder a GGUF was converted from): " +
			"its files are written unchanged, after checking that they convert to exactly the GGUF's vocabulary (default: the files `model init --tokenizer` stored in the GGUF; without either, tokenizer files generated from the GGUF)",
	}
	exportHFBaseFlag = &cli.StringFlag{
		Name:  "hf-base",
		Usage: "with --format peft: base_model_name_or_path written into adapter_config.json (a Hub id or the folder of the base model; default: the base GGUF's general.name)",
	}
)

// parseSafetensorsDType maps --type to a safetensors dtype for the
// Hugging Face formats (they also take bf16).
func parseSafetensorsDType(s string) (safetensors.DType, error) {
	switch strings.ToLower(s) {
	case "f32":
		return safetensors.F32, nil
	case "f16":
		return safetensors.F16, nil
	case "bf16":
		return safetensors.BF16, nil
	}
	return "", fmt.Errorf("--dtype %q: want f32, f16 or bf16", s)
}

// exportHF writes a PEFT adapter or a merged transformers model folder.
func exportHF(c *cli.Context, format string) error {
	format = strings.ToLower(format)
	if format != "peft" && format != "hf" {
		return fmt.Errorf("--format %q: want gguf, peft or hf", format)
	}
	merged := c.Bool(exportMergedFlag.Name)
	if format == "peft" && merged {
		return fmt.Errorf("--format peft writes the adapter alone; for a merged model use --format hf --merged")
	}
	if format == "hf" && !merged {
		return fmt.Errorf("--format hf writes a merged model: add --merged (or use --format peft for the adapter alone)")
	}
	var dtype safetensors.DType // "" = default of the format
	if c.IsSet(exportTypeFlag.Name) {
		var err error
		if dtype, err = parseSafetensorsDType(c.String(exportTypeFlag.Name)); err != nil {
			return err
		}
	}
	modelPath, loraPath, out := c.String(exportModelFlag.Name), c.String(exportLoraFlag.Name), c.String(exportOutFlag.Name)
	files := lora.HFFiles
	if format == "peft" {
		files = lora.PEFTFiles
	}
	inputs := append(exportInputs(modelPath, loraPath),
		safefile.Path{Flag: "--tokenizer", Path: c.String(exportHFTokenizerFlag.Name), Dir: true, Files: modelgen.HFTokenizerFiles})
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "--out", Path: out, Dir: true, Files: files}}, inputs); err != nil {
		return err
	}
	if err := checkNew(c, safefile.Path{Flag: "--out", Path: out, Dir: true, Files: files}); err != nil {
		return err
	}
	base, a, err := openBaseAndAdapter(modelPath, loraPath)
	if err != nil {
		return err
	}
	defer base.Close()
	start := time.Now()
	if format == "peft" {
		if c.IsSet(exportHFTokenizerFlag.Name) {
			return fmt.Errorf("--tokenizer applies to --format hf (a PEFT adapter has no tokenizer)")
		}
		if err := lora.ExportPEFT(a, base, out, lora.PEFTOptions{DType: dtype, BaseModel: c.String(exportHFBaseFlag.Name)}); err != nil {
			return err
		}
		log.Info().Str("out", out).Int("pairs", len(a.Pairs)).Int("rank", a.Rank()).Float32("alpha", a.Alpha).
			Str("took", time.Since(start).Round(time.Millisecond).String()).Msg("wrote PEFT adapter")
		return nil
	}
	var bar *progressbar.ProgressBar
	opt := lora.HFOptions{DType: dtype}
	if dir := c.String(exportHFTokenizerFlag.Name); dir != "" {
		if opt.Tokenizer, err = modelgen.LoadHFTokenizer(dir); err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		opt.Progress = func(done, total int64) {
			if bar == nil {
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("writing "+out), progressbar.OptionShowBytes(true),
					progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
			}
			bar.Set64(done)
		}
	}
	err = lora.ExportHF(base, a, out, opt)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return err
	}
	tokenizer := "generated from the GGUF vocabulary (it stores no Hugging Face tokenizer files; --tokenizer DIR writes the originals)"
	if opt.Tokenizer != nil {
		tokenizer = "the --tokenizer files, unchanged"
	} else if _, ok := base.String(modelgen.HFTokenizerJSONKey); ok {
		tokenizer = "the original files stored in the GGUF, unchanged"
	}
	log.Info().Str("out", out).Int("merged", len(a.Pairs)).Str("tokenizer", tokenizer).
		Str("took", time.Since(start).Round(time.Millisecond).String()).Msg("wrote transformers model folder")
	return nil
}
