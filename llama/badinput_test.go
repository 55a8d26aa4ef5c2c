package llama

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/modelgen"
)

func TestBadModelFiles(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	corrupt := append([]byte(nil), raw...)
	for i := 8; i < 24; i++ {
		corrupt[i] = 0xff // version, n_tensors, n_kv
	}
	garbage := append([]byte("GGUF"), make([]byte, 4096)...)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 4; i < len(garbage); i++ {
		garbage[i] = byte(rng.Uint32())
	}
	cases := map[string]string{
		"missing":      filepath.Join(dir, "does-not-exist.gguf"),
		"directory":    dir,
		"empty":        write("empty.gguf", nil),
		"not gguf":     write("text.gguf", []byte("hello, this is not a model\n")),
		"header only":  write("head.gguf", raw[:64]),
		"half":         write("half.gguf", raw[:len(raw)/2]),
		"last byte":    write("short.gguf", raw[:len(raw)-1]),
		"bad counts":   write("counts.gguf", corrupt),
		"random bytes": write("garbage.gguf", garbage),
		"wrong arch": rewriteModel(t, dir, "arch.gguf", func(k string, v any) (any, bool) {
			if k == "general.architecture" {
				return "nosucharch", true
			}
			return v, true
		}, nil),
		"missing tensor": rewriteModel(t, dir, "notensor.gguf", nil, func(name string) bool { return name != "output_norm.weight" }),
		"no block count": rewriteModel(t, dir, "nolayers.gguf", func(k string, v any) (any, bool) { return v, k != "qwen2.block_count" }, nil),
		// llama.cpp reads tokens as C strings: "x\x00y" is "x", a duplicate
		// (GGML_ASSERT in llama-vocab.cpp; found by corrupting a BERT vocab)
		"BYTE token in a BERT vocab": func() string {
			w, err := modelgen.NewBERTWriter(modelgen.DefaultBERTConfig())
			if err != nil {
				t.Fatal(err)
			}
			types := make([]int32, 1024)
			for i := range types {
				types[i] = 1
			}
			types[700] = 6 // llama-vocab.cpp token_to_byte: GGML_ABORT for WPM
			w.AddKV("tokenizer.ggml.token_type", types)
			p := filepath.Join(dir, "bertbyte.gguf")
			if err := w.WriteFile(p); err != nil {
				t.Fatal(err)
			}
			return p
		}(),
		"F16 token_types in a BERT": func() string {
			src := writeBERT(t, modelgen.DefaultBERTConfig())
			f, err := gguf.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w := gguf.NewWriter()
			for _, k := range f.Keys() {
				v, _ := f.Get(k)
				w.AddKV(k, v)
			}
			for _, ti := range f.Tensors {
				data, err := f.ReadTensorF32(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				if ti.Name == "token_types.weight" {
					err = w.AddTensorF16(ti.Name, ti.Shape, data)
				} else {
					err = w.AddTensorF32(ti.Name, ti.Shape, data)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(dir, "bert-f16-types.gguf")
			if err := w.WriteFile(p); err != nil {
				t.Fatal(err)
			}
			return p
		}(),
		"NUL in token": rewriteModel(t, dir, "nul.gguf", func(k string, v any) (any, bool) {
			if k == "tokenizer.ggml.tokens" {
				toks := slices.Clone(v.([]string))
				toks[300] = toks[299] + "\x00tail"
				return toks, true
			}
			return v, true
		}, nil),
	}
	for name, path := range cases {
		m, err := LoadModel(path, ModelParams{})
		if !errors.Is(err, ErrModelLoad) {
			m.Close()
			t.Errorf("%s: got %v, want ErrModelLoad", name, err)
		}
	}
	// single-byte corruptions of the header, metadata and tensor table: every one must
	// either load or fail with ErrModelLoad, never abort the process
	meta, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	metaEnd := int(meta.DataOffset)
	meta.Close()
	for i := 0; i < fuzzFlips(); i++ {
		b := append([]byte(nil), raw...)
		off := 4 + rng.IntN(metaEnd-4)
		b[off] ^= byte(1 + rng.IntN(255))
		p := write("flip.gguf", b)
		m, err := LoadModel(p, ModelParams{})
		if err != nil && !errors.Is(err, ErrModelLoad) {
			t.Fatalf("flip at %d: %v", off, err)
		}
		m.Close()
	}
}

// rewriteModel writes a copy of the tiny model with metadata and tensors
// filtered (kv may change or drop a key; keep may drop a tensor).
func rewriteModel(t *testing.T, dir, name string, kv func(string, any) (any, bool), keep func(string) bool) string {
	t.Helper()
	f, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, k := range f.Keys() {
		v, _ := f.Get(k)
		if kv != nil {
			var ok bool
			if v, ok = kv(k, v); !ok {
				continue
			}
		}
		w.AddKV(k, v)
	}
	for _, ti := range f.Tensors {
		if keep != nil && !keep(ti.Name) {
			continue
		}
		data, err := f.ReadTensorF32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensorF32(ti.Name, ti.Shape, data); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, name)
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadRequests(t *testing.T) {
	m := loadTiny(t)
	bg := context.Background()
	c := newCtx(t, m, ContextParams{NCtx: 256, NSeqMax: 2})
	long := make([]int32, 300)
	for i := range long {
		long[i] = int32(300 + i%100)
	}
	ok := long[:10]
	expect := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", what, err, want)
		}
	}
	_, err := c.Generate(bg, long, SampleParams{MaxTokens: 1})
	expect("prompt > context", err, ErrPromptTooLong)
	_, err = c.Generate(bg, long[:250], SampleParams{MaxTokens: 10})
	expect("prompt + max tokens > context", err, ErrContextFull)
	_, err = c.Generate(bg, []int32{1, 2, 512}, SampleParams{MaxTokens: 1})
	expect("token = n_vocab", err, ErrBadToken)
	_, err = c.Generate(bg, []int32{-1}, SampleParams{MaxTokens: 1})
	expect("negative token", err, ErrBadToken)
	_, err = c.Generate(bg, nil, SampleParams{MaxTokens: 1})
	expect("empty prompt", err, ErrInvalidArgument)
	_, err = c.Generate(bg, ok, SampleParams{N: 3, MaxTokens: 1})
	expect("N > NSeqMax", err, ErrInvalidArgument)
	_, err = c.Generate(bg, ok, SampleParams{MaxTokens: 1, Stop: []string{""}})
	expect("empty stop", err, ErrInvalidArgument)
	_, err = c.Score(bg, ok, []int32{5, 1 << 20})
	expect("score token out of range", err, ErrBadToken)
	_, err = c.Score(bg, long[:200], long[:100])
	expect("score too long", err, ErrContextFull)
	_, err = c.Logits([]int32{99999})
	expect("logits token", err, ErrBadToken)
	_, err = m.Detokenize([]int32{1 << 30})
	expect("detokenize", err, ErrBadToken)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, sp := range []SampleParams{{Temperature: nan}, {Temperature: inf}, {TopP: nan}, {TopP: -inf}, {MinP: nan}, {MinP: 2}} {
		sp.MaxTokens = 2
		_, err = c.Generate(bg, ok, sp)
		expect(fmt.Sprintf("sampling %+v", sp), err, ErrInvalidArgument)
	}
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	_, err = c.Generate(cancelled, ok, SampleParams{MaxTokens: 5})
	expect("cancelled", err, context.Canceled)
	for _, p := range []ContextParams{{NSeqMax: -1}, {NSeqMax: 1 << 20}, {NCtx: -5}, {NBatch: -1}, {KVType: "q4"}, {FlashAttn: "maybe"}} {
		_, err := NewContext(m, p)
		expect("context params", err, ErrInvalidArgument)
	}
	// NBatch below NSeqMax is raised so a generation step fits one batch
	small := newCtx(t, m, ContextParams{NCtx: 256, NSeqMax: 4, NBatch: 2})
	if seqs, err := small.Generate(bg, ok, SampleParams{N: 4, MaxTokens: 3, Temperature: 1}); err != nil || len(seqs) != 4 {
		t.Fatalf("NBatch < N: %v", err)
	}
	// the context still works after all that
	if _, err := c.Generate(bg, ok, SampleParams{MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	// use after close
	m2 := loadTiny(t)
	c2 := newCtx(t, m2, ContextParams{NCtx: 256})
	m2.Close() // model freed only when the context is closed
	if _, err := c2.Generate(bg, ok, SampleParams{MaxTokens: 2}); err != nil {
		t.Fatalf("context after its model's Close: %v", err)
	}
	c2.Close()
	c2.Close()
	_, err = c2.Generate(bg, ok, SampleParams{MaxTokens: 2})
	expect("closed context", err, ErrClosed)
	_, err = m2.Tokenize("x", false, false)
	expect("closed model", err, ErrClosed)
	_, err = NewContext(m2, ContextParams{})
	expect("context of closed model", err, ErrClosed)
	var nilModel *Model
	if nilModel.Close() != nil || (*Context)(nil).Close() != nil || (*Adapter)(nil).Close() != nil {
		t.Fatal("nil Close")
	}
}

// fuzzFlips is the number of corrupted-byte loads of TestBadModelFiles
// (EMPO2_FUZZ_FLIPS overrides the default 40 for longer local runs).
func fuzzFlips() int {
	if n, err := strconv.Atoi(os.Getenv("EMPO2_FUZZ_FLIPS")); err == nil {
		return n
	}
	return 40
}

// TestContextParamsNoAbort creates contexts with awkward size combinations
// (NSeqMax not dividing NBatch, tiny batches), which must not abort.
func TestContextParamsNoAbort(t *testing.T) {
	m := loadTiny(t)
	for _, emb := range []bool{false, true} {
		for _, p := range []ContextParams{{NSeqMax: 3, NBatch: 64, NCtx: 64}, {NSeqMax: 3, NBatch: 64, NCtx: 64, KVUnified: true}, {NSeqMax: 5, NBatch: 7}, {NSeqMax: 4, NBatch: 64}, {NSeqMax: 7, NBatch: 100, NCtx: 100}, {NSeqMax: 3, NBatch: 256, NCtx: 256}} {
			p.Embeddings, p.Threads = emb, 1
			t.Logf("%+v", p)
			c, err := NewContext(m, p)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	}
}

// TestCorruptedModelsRun corrupts single bytes of the header, metadata and
// tensor table of a Qwen2 and a BERT model; each file must fail to load
// with ErrModelLoad, or load and then generate/score/embed without aborting
// (a flipped hyperparameter can load and only break at decode time).
func TestCorruptedModelsRun(t *testing.T) {
	dir := t.TempDir()
	bert := writeBERT(t, modelgen.DefaultBERTConfig())
	seed, _ := strconv.ParseUint(os.Getenv("EMPO2_FUZZ_SEED"), 10, 64) // for longer local runs
	rng := rand.New(rand.NewPCG(7, 7+seed))
	bg := context.Background()
	for _, src := range []string{tinyPath, bert} {
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		meta, err := gguf.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		end := int(meta.DataOffset)
		meta.Close()
		loaded := 0
		for i := 0; i < fuzzFlips(); i++ {
			b := slices.Clone(raw)
			b[4+rng.IntN(end-4)] ^= byte(1 + rng.IntN(255))
			p := filepath.Join(dir, "flip.gguf")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := LoadModel(p, ModelParams{})
			if err != nil {
				if !errors.Is(err, ErrModelLoad) {
					t.Fatalf("flip: %v", err)
				}
				continue
			}
			loaded++
			if src == bert {
				if e, err := NewEmbedderFromModel(m, EmbedderOptions{Threads: 1, MaxTokens: 64}); err == nil {
					e.Embed(bg, []string{"go to the kitchen and open the door"})
					e.Close()
				}
			} else if c, err := NewContext(m, ContextParams{NCtx: 128, Threads: 1}); err == nil {
				if toks, err := m.Tokenize("<|im_start|>user hello there<|im_end|>", false, true); err == nil && len(toks) > 3 {
					c.Generate(bg, toks, SampleParams{MaxTokens: 3, Temperature: 1})
					c.Score(bg, toks[:3], toks[3:])
				}
				c.Close()
			}
			m.Close()
		}
		t.Logf("%s: %d of %d corrupted files loaded and ran", filepath.Base(src), loaded, fuzzFlips())
	}
}
