package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
)

var (
	modelQuantizeTypeFlag = &cli.StringFlag{Name: "dtype", Aliases: []string{"type"}, Required: true,
		Usage: "target type, by llama-quantize's names: " + strings.Join(llama.QuantizeTypes(), ", ")}
	modelQuantizeThreadsFlag   = &cli.IntFlag{Name: "threads", Usage: "quantizing threads", DefaultText: "all cores"}
	modelQuantizeRequantFlag   = &cli.BoolFlag{Name: "allow-requantize", Usage: "accept quantized input tensors (dequantized, then written in the target type; e.g. to f32)"}
	modelQuantizePureFlag      = &cli.BoolFlag{Name: "pure", Usage: "every matrix in the target type (no k-quant mix)"}
	modelQuantizeKeepSplitFlag = &cli.BoolFlag{Name: "keep-split", Usage: "write a split input as the same number of splits (OUT's prefix-0000i-of-0000n.gguf)"}
)

// modelQuantizeCmd is `empo2 model quantize`: llama.cpp's own quantizer
// (llama_model_quantize, what llama-quantize runs) through llama.Quantize.
var modelQuantizeCmd = &cli.Command{
	Name:      "quantize",
	Usage:     "write a GGUF model in another type with llama.cpp's quantizer (Q4_K_M, Q4_0, Q8_0, F16, ...), as llama-quantize",
	ArgsUsage: "IN OUT",
	Description: "IN may be the first file of a split model (name-00001-of-0000N.gguf).\n\nExamples:\n" +
		"   empo2 model quantize tiny.gguf tiny-q8_0.gguf --dtype q8_0\n" +
		"   empo2 model quantize qwen2.5-7b-instruct-f16-00001-of-00004.gguf qwen2.5-7b-q4_k_m.gguf --dtype q4_k_m\n" +
		"   empo2 model quantize tiny-q8_0.gguf tiny-dequantized.gguf --dtype f32 --allow-requantize --pure",
	Flags:  []cli.Flag{modelQuantizeTypeFlag, modelQuantizeThreadsFlag, modelQuantizeRequantFlag, modelQuantizePureFlag, modelQuantizeKeepSplitFlag},
	Action: modelQuantize,
}

func modelQuantize(c *cli.Context) error {
	if c.NArg() != 2 {
		return fmt.Errorf("model quantize: want IN and OUT, got %d arguments", c.NArg())
	}
	in, out := c.Args().Get(0), c.Args().Get(1)
	if sameFile(out, in) {
		return fmt.Errorf("model quantize: OUT %s would overwrite IN", out)
	}
	f, err := gguf.Open(in)
	if err != nil {
		return fmt.Errorf("model quantize: %w", err)
	}
	inBytes, splits := f.Size, len(f.Splits)
	f.Close()
	typ := c.String(modelQuantizeTypeFlag.Name)
	t0 := time.Now()
	if err := llama.Quantize(in, out, llama.QuantizeParams{
		Type: typ, Threads: c.Int(modelQuantizeThreadsFlag.Name), AllowRequantize: c.Bool(modelQuantizeRequantFlag.Name),
		Pure: c.Bool(modelQuantizePureFlag.Name), KeepSplit: c.Bool(modelQuantizeKeepSplitFlag.Name),
	}); err != nil {
		return err
	}
	ev := log.Info().Str("in", in).Str("out", out).Str("dtype", typ).Int64("in_bytes", inBytes).Dur("took", time.Since(t0))
	if splits > 0 {
		ev = ev.Int("in_splits", splits)
	}
	if st, err := os.Stat(out); err == nil {
		ev = ev.Int64("out_bytes", st.Size())
	}
	ev.Msg("quantized model")
	return nil
}
