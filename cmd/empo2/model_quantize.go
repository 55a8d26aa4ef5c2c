package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/llama"
)

var (
	modelQuantizeTypeFlag = &cli.StringFlag{Name: "dtype", Aliases: []string{"type"}, Required: true,
		Usage: "target type, by llama-quantize's names: " + strings.Join(llama.QuantizeTypes(), ", ")}
	modelQuantizeThreadsFlag = &cli.IntFlag{Name: "threads", Usage: "quantizing threads", DefaultText: "all cores"}
	modelQuantizeRequantFlag = &cli.BoolFlag{Name: "allow-requantize", Usage: "accept quantized input tensors (dequantized, then written in the target type; e.g. to f32)"}
	modelQuantizePureFlag    = &cli.BoolFlag{Name: "pure", Usage: "every matrix in the target type (no k-quant mix)"}
)

// modelQuantizeCmd is `empo2 model quantize`: llama.cpp's own quantizer
// (llama_model_quantize, what llama-quantize runs) through llama.Quantize.
var modelQuantizeCmd = &cli.Command{
	Name:      "quantize",
	Usage:     "write a GGUF model in another type with llama.cpp's quantizer (Q4_K_M, Q4_0, Q8_0, F16, ...), as llama-quantize",
	ArgsUsage: "IN OUT",
	Description: "IN may be the first file of a split model (name-00001-of-0000N.gguf); OUT is one file.\n\nExamples:\n" +
		"   empo2 model quantize tiny.gguf tiny-q8_0.gguf --dtype q8_0\n" +
		"   empo2 model quantize qwen2.5-7b-instruct-f16-00001-of-00004.gguf qwen2.5-7b-q4_k_m.gguf --dtype q4_k_m\n" +
		"   empo2 model quantize tiny-q8_0.gguf tiny-dequantized.gguf --dtype f32 --allow-requantize --pure",
	Flags:  []cli.Flag{modelQuantizeTypeFlag, modelQuantizeThreadsFlag, modelQuantizeRequantFlag, modelQuantizePureFlag, forceFlag},
	Action: modelQuantize,
}

func modelQuantize(c *cli.Context) error {
	if c.NArg() != 2 {
		return fmt.Errorf("model quantize: want IN and OUT, got %d arguments", c.NArg())
	}
	in, out := c.Args().Get(0), c.Args().Get(1)
	f, err := gguf.Open(in)
	if err != nil {
		return fmt.Errorf("model quantize: %w", err)
	}
	inBytes, splits := f.Size, f.Splits
	f.Close()
	inputs := []safefile.Path{{Flag: "IN", Path: in}}
	for _, p := range splits {
		inputs = append(inputs, safefile.Path{Flag: "IN (split)", Path: p})
	}
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "OUT", Path: out}}, inputs); err != nil {
		return err
	}
	if err := checkNew(c, safefile.Path{Flag: "OUT", Path: out}); err != nil {
		return err
	}
	// llama.cpp writes its output in place: it writes a temporary file
	// beside OUT, renamed over OUT once complete
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("model quantize: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // a no-op once renamed
	typ := c.String(modelQuantizeTypeFlag.Name)
	t0 := time.Now()
	if err := llama.Quantize(in, tmp.Name(), llama.QuantizeParams{
		Type: typ, Threads: c.Int(modelQuantizeThreadsFlag.Name), AllowRequantize: c.Bool(modelQuantizeRequantFlag.Name),
		Pure: c.Bool(modelQuantizePureFlag.Name),
	}); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("model quantize: %w", err)
	}
	ev := log.Info().Str("in", in).Str("out", out).Str("dtype", typ).Int64("in_bytes", inBytes).Dur("took", time.Since(t0))
	if len(splits) > 0 {
		ev = ev.Int("in_splits", len(splits))
	}
	if st, err := os.Stat(out); err == nil {
		ev = ev.Int64("out_bytes", st.Size())
	}
	ev.Msg("quantized model")
	return nil
}
