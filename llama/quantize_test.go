package llama

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/modelgen"
)

// decodeQ4_0 decodes ggml's Q4_0 blocks (per 32 weights: an F16 scale d,
// then 16 bytes whose low nibbles are weights 0–15 and high nibbles
// weights 16–31, each (q − 8)·d), written from the format's definition.
func decodeQ4_0(raw []byte) []float32 {
	out := make([]float32, 0, len(raw)/18*32)
	for o := 0; o+18 <= len(raw); o += 18 {
		d := gguf.F16ToF32(binary.LittleEndian.Uint16(raw[o:]))
		var blk [32]float32
		for j, b := range raw[o+2 : o+18] {
			blk[j] = float32(int(b&0x0f)-8) * d
			blk[j+16] = float32(int(b>>4)-8) * d
		}
		out = append(out, blk[:]...)
	}
	return out
}

// TestQuantize: llama.Quantize runs llama.cpp's quantizer. Q4_0 output
// decodes (by the format's definition, in Go) to within one quantization
// step of the original weights (plus d's F16 rounding), and llama.cpp's own dequantization of it
// (--dtype f32 --allow-requantize) gives exactly those decoded values; the
// metadata is copied and general.file_type set; Q4_K_M mixes Q4_K and Q6_K
// on 256-wide rows; the quantized models load and generate; a split input
// (3 files) quantizes to the same file as the unsplit one.
func TestQuantize(t *testing.T) {
	dir := t.TempDir()
	cfg := modelgen.DefaultConfig()
	cfg.Hidden, cfg.FFN = 256, 512
	src := filepath.Join(dir, "m.gguf")
	if err := modelgen.Write(src, cfg); err != nil {
		t.Fatal(err)
	}
	orig, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	q4 := filepath.Join(dir, "q4_0.gguf")
	if err := Quantize(src, q4, QuantizeParams{Type: "q4_0", Threads: 1, Pure: true}); err != nil {
		t.Fatal(err)
	}
	dq := filepath.Join(dir, "dq.gguf")
	if err := Quantize(q4, dq, QuantizeParams{Type: "f32", Threads: 1, AllowRequantize: true, Pure: true}); err != nil {
		t.Fatal(err)
	}
	fq, err := gguf.Open(q4)
	if err != nil {
		t.Fatal(err)
	}
	defer fq.Close()
	fd, err := gguf.Open(dq)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if ft, _ := fq.Uint32("general.file_type"); ft != 2 { // LLAMA_FTYPE_MOSTLY_Q4_0
		t.Fatalf("general.file_type %d", ft)
	}
	if a, _ := fq.String("tokenizer.chat_template"); a == "" {
		t.Fatal("metadata not copied")
	}
	checked := 0
	for _, ti := range fq.Tensors {
		if ti.Type != gguf.TypeQ4_0 {
			continue
		}
		raw, _ := fq.ReadTensorRaw(ti.Name)
		mine := decodeQ4_0(raw)
		ref, err := fd.ReadTensorF32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := orig.ReadTensorF32(ti.Name)
		if !reflect.DeepEqual(mine, ref) {
			t.Fatalf("%s: llama.cpp's dequantization differs from the Q4_0 format's", ti.Name)
		}
		for i := range x {
			d := math.Abs(float64(gguf.F16ToF32(binary.LittleEndian.Uint16(raw[i/32*18:]))))
			// at most one step |d| (the clamp at 15 for the value opposite
			// the block's extreme), plus 8 × d's rounding to F16 (2^-11)
			if math.Abs(float64(x[i]-mine[i])) > d*1.005 {
				t.Fatalf("%s[%d]: %v quantized to %v (step %v)", ti.Name, i, x[i], mine[i], d)
			}
		}
		checked++
	}
	if checked < 14 {
		t.Fatalf("only %d Q4_0 matrices", checked)
	}

	km := filepath.Join(dir, "q4_k_m.gguf")
	if err := Quantize(src, km, QuantizeParams{Type: "Q4_K_M", Threads: 1}); err != nil {
		t.Fatal(err)
	}
	fk, err := gguf.Open(km)
	if err != nil {
		t.Fatal(err)
	}
	types := map[gguf.GGMLType]int{}
	for _, ti := range fk.Tensors {
		types[ti.Type]++
	}
	fk.Close()
	if types[gguf.TypeQ4_K] == 0 || types[gguf.TypeQ6_K] == 0 {
		t.Fatalf("Q4_K_M types: %v", types)
	}
	for _, p := range []string{q4, km} {
		m, err := LoadModel(p, ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewContext(m, ContextParams{NCtx: 128, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		seqs, err := c.Generate(context.Background(), []int32{1, 2, 3}, SampleParams{MaxTokens: 4, IgnoreEOG: true})
		if err != nil || len(seqs[0].Tokens) != 4 {
			t.Fatalf("%s: generate %v %v", p, seqs, err)
		}
		c.Close()
		m.Close()
	}

	// a split input: the same output as the unsplit file
	paths, err := gguf.WriteSplits(orig, filepath.Join(dir, "s"), 3)
	if err != nil {
		t.Fatal(err)
	}
	q4s := filepath.Join(dir, "q4_0-from-splits.gguf")
	if err := Quantize(paths[0], q4s, QuantizeParams{Type: "q4_0", Threads: 1, Pure: true}); err != nil {
		t.Fatal(err)
	}
	a, b := mustRead(t, q4), mustRead(t, q4s)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("quantizing the split model gives another file than the unsplit one")
	}
}

// TestQuantizeErrors: an unknown type, OUT = IN, a missing input or output
// directory are errors before llama.cpp runs.
func TestQuantizeErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "o.gguf")
	for _, c := range []struct {
		in, out, typ string
		want         error
	}{
		{tinyPath, out, "q9_9", ErrQuantize},
		{tinyPath, tinyPath, "q8_0", ErrQuantize},
		{filepath.Join(t.TempDir(), "missing.gguf"), out, "q8_0", ErrModelLoad},
		{tinyPath, filepath.Join(t.TempDir(), "no", "dir.gguf"), "q8_0", ErrQuantize},
	} {
		if err := Quantize(c.in, c.out, QuantizeParams{Type: c.typ, Threads: 1}); !errors.Is(err, c.want) {
			t.Errorf("%s → %s as %s: got %v, want %v", c.in, c.out, c.typ, err, c.want)
		}
	}
}

// TestSplitModelLoads: llama.cpp loads a model written as 3 splits from
// its first file and computes what the unsplit file computes: the same
// logits, bit for bit.
func TestSplitModelLoads(t *testing.T) {
	orig, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := gguf.WriteSplits(orig, filepath.Join(t.TempDir(), "tiny"), 3)
	orig.Close()
	if err != nil {
		t.Fatal(err)
	}
	logits := func(path string) []float32 {
		m, err := LoadModel(path, ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		c, err := NewContext(m, ContextParams{NCtx: 64, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.Logits([]int32{5, 6, 7, 8})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if !reflect.DeepEqual(logits(paths[0]), logits(tinyPath)) {
		t.Fatal("split model logits differ")
	}
	if _, err := LoadModel(paths[2], ModelParams{}); !errors.Is(err, ErrModelLoad) {
		t.Fatalf("loading the last split: got %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
