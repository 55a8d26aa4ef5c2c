package modelgen

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/empo2/empo2/gguf"
)

//go:embed corpus.txt
var builtinCorpus string

//go:embed chat_template.jinja
var chatTemplate string

// BuiltinCorpus returns the text the tokenizer is trained on when
// Config.Corpus is empty.
func BuiltinCorpus() string { return builtinCorpus }

// ChatTemplate returns the Qwen2.5 ChatML Jinja template written to
// tokenizer.chat_template.
func ChatTemplate() string { return chatTemplate }

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("modelgen: invalid config")

// Config describes the model to generate.
type Config struct {
	Layers, Hidden, Heads, KVHeads, FFN, Vocab, Ctx int
	Seed                                            int64
	DType                                           string  // "f32" (default when empty) | "f16"
	Corpus                                          string  // tokenizer training text; "" = built-in corpus
	TiedEmbeddings                                  bool    // no output.weight when true
	RopeBase                                        float32 // 0 = 1e6, as Qwen2.5
	// InitStd is the standard deviation of every weight matrix. 0 (the
	// default) scales each matrix by its fan-in: std = 1/sqrt(fan_in) (the
	// token embedding 1/sqrt(Hidden)), which keeps activations, attention
	// scores and logits at unit scale for any model size: non-degenerate
	// next-token distributions that are not saturated.
	InitStd float32
	// Name is general.name; "" = "empo2-tiny-qwen2".
	Name string
	// HFTokenizer, when set, is the model's vocabulary instead of a trained
	// one (Corpus must be empty): written as llama.cpp's converter writes it
	// (HFTokenizer.AddTo), padded to Vocab tokens (0 = its DefaultVocab).
	HFTokenizer *HFTokenizer
}

// RMSNormEps is attention.layer_norm_rms_epsilon, as Qwen2.5.
const RMSNormEps = 1e-6

// DefaultConfig is a tiny model: 2 layers, hidden 64, 4 heads (2 KV heads),
// FFN 128, vocab 512, context 512, f32, untied output.
func DefaultConfig() Config {
	return Config{Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, FFN: 128, Vocab: 512, Ctx: 512, Seed: 1, DType: "f32", RopeBase: 1e6}
}

// withDefaults fills the optional fields.
func (c Config) withDefaults() Config {
	if c.DType == "" {
		c.DType = "f32"
	}
	if c.RopeBase == 0 {
		c.RopeBase = 1e6
	}
	if c.Name == "" {
		c.Name = "empo2-tiny-qwen2"
	}
	if c.Vocab == 0 && c.HFTokenizer != nil {
		c.Vocab = c.HFTokenizer.DefaultVocab()
	}
	return c
}

// Validate reports the first problem with c (wrapping ErrConfig).
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := configError
	if err := checkShape(c.Layers, c.Hidden, c.Heads, c.DType,
		dim{"kv-heads", c.KVHeads}, dim{"ffn", c.FFN}, dim{"vocab", c.Vocab}, dim{"ctx", c.Ctx}); err != nil {
		return err
	}
	if c.Heads%c.KVHeads != 0 {
		return bad("kv-heads (%d) must divide heads (%d)", c.KVHeads, c.Heads)
	}
	if hd := c.Hidden / c.Heads; hd%2 != 0 {
		return bad("head dim hidden/heads = %d must be even (RoPE rotates pairs)", hd)
	}
	if h := c.HFTokenizer; h != nil {
		if c.Corpus != "" {
			return bad("a corpus and a Hugging Face tokenizer: give one")
		}
		if c.Vocab < len(h.Tokens) {
			return bad("vocab %d is smaller than the tokenizer's %d tokens", c.Vocab, len(h.Tokens))
		}
	} else if min := 256 + len(Specials) + 1; c.Vocab < min {
		return bad("vocab %d must be at least %d (256 byte tokens + %d specials + 1 merge)", c.Vocab, min, len(Specials))
	}
	if c.RopeBase < 0 || math.IsNaN(float64(c.RopeBase)) || math.IsInf(float64(c.RopeBase), 0) {
		return bad("rope base %v must be positive and finite", c.RopeBase)
	}
	if c.InitStd < 0 || math.IsNaN(float64(c.InitStd)) || math.IsInf(float64(c.InitStd), 0) {
		return bad("init std %v must be >= 0 and finite", c.InitStd)
	}
	if c.Corpus == "" && builtinCorpus == "" && c.HFTokenizer == nil {
		return bad("empty corpus")
	}
	return checkTensorSizes(c.Hidden, c.Vocab, c.FFN)
}

// configError wraps ErrConfig with a formatted reason.
func configError(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
}

// dim is a named configuration dimension.
type dim struct {
	name string
	v    int
}

// MaxLayers is llama.cpp's LLAMA_MAX_LAYERS (src/llama-hparams.h): a model
// with more blocks does not load.
const MaxLayers = 512

// checkShape validates what the Qwen2 and BERT configurations share: every
// dimension positive and at most 2^20, at most MaxLayers layers, heads dividing
// hidden, and the dtype.
func checkShape(layers, hidden, heads int, dtype string, more ...dim) error {
	const maxDim = 1 << 20
	for _, f := range append([]dim{{"layers", layers}, {"hidden", hidden}, {"heads", heads}}, more...) {
		if f.v <= 0 {
			return configError("%s must be positive, got %d", f.name, f.v)
		}
		if f.v > maxDim {
			return configError("%s %d is too large (max %d)", f.name, f.v, maxDim)
		}
	}
	if layers > MaxLayers {
		return configError("layers %d is too many (llama.cpp loads at most %d)", layers, MaxLayers)
	}
	if hidden%heads != 0 {
		return configError("heads (%d) must divide hidden (%d)", heads, hidden)
	}
	if dtype != "f32" && dtype != "f16" {
		return configError("dtype %q: want f32 or f16", dtype)
	}
	return nil
}

// checkTensorSizes keeps every tensor addressable: each of the given
// dimensions times hidden must stay within 2^34 elements.
func checkTensorSizes(hidden int, dims ...int) error {
	for _, d := range dims {
		if uint64(d)*uint64(hidden) > 1<<34 {
			return configError("tensor too large (%d × hidden %d > 2^34 elements)", d, hidden)
		}
	}
	return nil
}

// ParamCount is the number of parameters of the model c describes.
func (c Config) ParamCount() int64 {
	c = c.withDefaults()
	h, f, v := int64(c.Hidden), int64(c.FFN), int64(c.Vocab)
	kvDim := h / int64(max(c.Heads, 1)) * int64(c.KVHeads)
	perLayer := h + // attn_norm
		h*h + h + // q
		2*(h*kvDim+kvDim) + // k, v
		h*h + // o
		h + // ffn_norm
		3*h*f
	n := v*h + h + int64(c.Layers)*perLayer
	if !c.TiedEmbeddings {
		n += v * h
	}
	return n
}

// FileBytes estimates the size of the GGUF file c describes, before it is
// written: 2-D weights at the dtype's width, norms and biases F32, plus the
// tokenizer's arrays (about 16 bytes per token and per merge; a Hugging
// Face tokenizer's metadata as HFTokenizer.MetadataBytes).
func (c Config) FileBytes() int64 {
	c = c.withDefaults()
	h := int64(c.Hidden)
	kvDim := h / int64(max(c.Heads, 1)) * int64(c.KVHeads)
	oneD := int64(c.Layers)*(2*h+h+2*kvDim) + h // norms, q/k/v biases, output norm
	twoD := c.ParamCount() - oneD
	width := int64(4)
	if c.DType == "f16" {
		width = 2
	}
	meta := 2 * 16 * int64(c.Vocab)
	if c.HFTokenizer != nil {
		meta = c.HFTokenizer.MetadataBytes(c.Vocab)
	}
	return twoD*width + oneD*4 + meta + 4096
}

// tensorSpec is one tensor to generate.
type tensorSpec struct {
	name  string
	shape []uint64 // ggml order: ne0 = input (fan-in) dim
	kind  int      // kindMatrix, kindNorm, kindBias
	std   float64
}

const (
	kindMatrix = iota
	kindNorm
	kindBias
	kindZero // LayerNorm biases
)

func (c Config) tensors() []tensorSpec {
	h, f, v := uint64(c.Hidden), uint64(c.FFN), uint64(c.Vocab)
	kvDim := h / uint64(c.Heads) * uint64(c.KVHeads)
	std := func(fanIn uint64) float64 {
		if c.InitStd > 0 {
			return float64(c.InitStd)
		}
		return 1 / math.Sqrt(float64(fanIn))
	}
	biasStd := func(fanIn uint64) float64 { return 0.1 * std(fanIn) }
	ts := []tensorSpec{{"token_embd.weight", []uint64{h, v}, kindMatrix, std(h)}}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			tensorSpec{p + "attn_norm.weight", []uint64{h}, kindNorm, 0},
			tensorSpec{p + "attn_q.weight", []uint64{h, h}, kindMatrix, std(h)},
			tensorSpec{p + "attn_q.bias", []uint64{h}, kindBias, biasStd(h)},
			tensorSpec{p + "attn_k.weight", []uint64{h, kvDim}, kindMatrix, std(h)},
			tensorSpec{p + "attn_k.bias", []uint64{kvDim}, kindBias, biasStd(h)},
			tensorSpec{p + "attn_v.weight", []uint64{h, kvDim}, kindMatrix, std(h)},
			tensorSpec{p + "attn_v.bias", []uint64{kvDim}, kindBias, biasStd(h)},
			tensorSpec{p + "attn_output.weight", []uint64{h, h}, kindMatrix, std(h)},
			tensorSpec{p + "ffn_norm.weight", []uint64{h}, kindNorm, 0},
			tensorSpec{p + "ffn_gate.weight", []uint64{h, f}, kindMatrix, std(h)},
			tensorSpec{p + "ffn_up.weight", []uint64{h, f}, kindMatrix, std(h)},
			tensorSpec{p + "ffn_down.weight", []uint64{f, h}, kindMatrix, std(f)},
		)
	}
	ts = append(ts, tensorSpec{"output_norm.weight", []uint64{h}, kindNorm, 0})
	if !c.TiedEmbeddings {
		ts = append(ts, tensorSpec{"output.weight", []uint64{h, v}, kindMatrix, std(h)})
	}
	return ts
}

// stream returns the 64-bit stream id of a tensor (FNV-1a of its name), so a
// tensor's values depend only on the seed and its name.
func stream(name string) uint64 {
	hh := fnv.New64a()
	hh.Write([]byte(name))
	return hh.Sum64()
}

// genTensor writes the tensor's encoded values to w in chunks.
func genTensor(w io.Writer, t tensorSpec, seed int64, f16 bool) error {
	n := uint64(1)
	for _, d := range t.shape {
		n *= d
	}
	rng := rand.New(rand.NewPCG(uint64(seed), stream(t.name)))
	const chunk = 1 << 14
	width := 4
	if f16 {
		width = 2
	}
	buf := make([]byte, chunk*width)
	for done := uint64(0); done < n; {
		m := min(chunk, n-done)
		for i := uint64(0); i < m; i++ {
			var x float32
			switch t.kind {
			case kindNorm:
				x = 1
			case kindZero:
				x = 0
			default:
				x = float32(rng.NormFloat64() * t.std)
			}
			if f16 {
				binary.LittleEndian.PutUint16(buf[2*i:], gguf.F32ToF16(x))
			} else {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
			}
		}
		if _, err := w.Write(buf[:m*uint64(width)]); err != nil {
			return err
		}
		done += m
	}
	return nil
}

// Write generates the model described by cfg and writes it to path
// (atomically).
func Write(path string, cfg Config) error { return WriteProgress(path, cfg, nil) }

// WriteProgress is Write with a progress callback (bytes of tensor data
// written so far, total), called after each tensor.
func WriteProgress(path string, cfg Config, progress func(done, total int64)) error {
	w, err := NewWriter(cfg)
	if err != nil {
		return err
	}
	w.Progress = progress
	if err := w.WriteFile(path); err != nil {
		return fmt.Errorf("modelgen: %w", err)
	}
	return nil
}

// NewWriter returns a gguf.Writer holding the model's metadata and lazily
// generated tensors, for callers that want to add keys before writing.
func NewWriter(cfg Config) (*gguf.Writer, error) {
	var tok *Tokenizer
	if cfg.HFTokenizer == nil {
		var err error
		if tok, err = cfg.Tokenizer(); err != nil {
			return nil, err
		}
	} else if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f16 := cfg.DType == "f16"
	w := newModelWriter(modelHeader{arch: "qwen2", name: cfg.Name, f16: f16,
		description: fmt.Sprintf("random-weight Qwen2 generated by empo2 modelgen (seed %d)", cfg.Seed),
		layers:      cfg.Layers, ctx: cfg.Ctx, hidden: cfg.Hidden, ffn: cfg.FFN, heads: cfg.Heads})
	w.AddKV("qwen2.attention.head_count_kv", uint32(cfg.KVHeads))
	w.AddKV("qwen2.rope.freq_base", cfg.RopeBase)
	w.AddKV("qwen2.attention.layer_norm_rms_epsilon", float32(RMSNormEps))
	w.AddKV("empo2.modelgen.seed", cfg.Seed)
	if cfg.HFTokenizer != nil {
		if err := cfg.HFTokenizer.AddTo(w, cfg.Vocab); err != nil {
			return nil, err
		}
	} else {
		addTokenizer(w, tok)
	}
	if err := addGenTensors(w, cfg.tensors(), cfg.Seed, func(t tensorSpec) bool {
		return f16 && t.kind == kindMatrix && len(t.shape) == 2
	}); err != nil {
		return nil, err
	}
	return w, nil
}

// addTokenizer writes a trained tokenizer with the ChatML specials.
func addTokenizer(w *gguf.Writer, tok *Tokenizer) {
	w.AddKV("tokenizer.ggml.model", "gpt2")
	w.AddKV("tokenizer.ggml.pre", "qwen2")
	w.AddKV("tokenizer.ggml.tokens", tok.Tokens)
	w.AddKV("tokenizer.ggml.token_type", tok.Types)
	w.AddKV("tokenizer.ggml.merges", tok.Merges)
	eot, _ := tok.ID(TokEndOfText)
	imEnd, _ := tok.ID(TokImEnd)
	w.AddKV("tokenizer.ggml.eos_token_id", uint32(imEnd))
	w.AddKV("tokenizer.ggml.padding_token_id", uint32(eot))
	w.AddKV("tokenizer.ggml.bos_token_id", uint32(eot))
	w.AddKV("tokenizer.ggml.add_bos_token", false)
	w.AddKV("tokenizer.chat_template", chatTemplate)
}

// addGenTensors adds ts to w as tensors generated lazily from seed, F16
// where half says so and F32 otherwise. Every tensor has its own generator
// (seed, name), so they are generated in parallel, up to GOMAXPROCS ahead of
// the one being written (genAhead), with the same bytes as one by one.
func addGenTensors(w *gguf.Writer, ts []tensorSpec, seed int64, half func(tensorSpec) bool) error {
	g := &genAhead{ts: ts, seed: seed, half: half, ahead: runtime.GOMAXPROCS(0),
		done: make([]chan struct{}, len(ts)), data: make([][]byte, len(ts)), errs: make([]error, len(ts))}
	for i := range g.done {
		g.done[i] = make(chan struct{})
	}
	for i, t := range ts {
		typ := gguf.TypeF32
		if half(t) {
			typ = gguf.TypeF16
		}
		if err := w.AddTensorFunc(t.name, t.shape, typ, func(out io.Writer) error { return g.write(i, out) }); err != nil {
			return fmt.Errorf("modelgen: %w", err)
		}
	}
	return nil
}

// genAhead generates tensors in goroutines, in order, at most ahead of the
// one the writer asks for; each tensor's bytes are dropped once written.
type genAhead struct {
	ts    []tensorSpec
	seed  int64
	half  func(tensorSpec) bool
	ahead int
	mu    sync.Mutex
	next  int // first tensor not started
	done  []chan struct{}
	data  [][]byte
	errs  []error
}

func (g *genAhead) write(i int, out io.Writer) error {
	g.mu.Lock()
	for ; g.next < len(g.ts) && g.next <= i+g.ahead-1; g.next++ {
		j := g.next
		go func() {
			defer close(g.done[j])
			var b bytes.Buffer
			n, width := 1, 4
			for _, d := range g.ts[j].shape {
				n *= int(d)
			}
			if g.half(g.ts[j]) {
				width = 2
			}
			b.Grow(n * width)
			g.errs[j] = genTensor(&b, g.ts[j], g.seed, g.half(g.ts[j]))
			g.data[j] = b.Bytes()
		}()
	}
	g.mu.Unlock()
	<-g.done[i]
	data, err := g.data[i], g.errs[i]
	g.data[i] = nil
	if err != nil {
		return err
	}
	_, err = out.Write(data)
	return err
}

// Tokenizer trains and returns the tokenizer cfg's model would get (not
// for a Hugging Face tokenizer's model).
func (c Config) Tokenizer() (*Tokenizer, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.HFTokenizer != nil {
		return nil, configError("the model's vocabulary is a Hugging Face tokenizer, not a trained one")
	}
	corpus := c.Corpus
	if corpus == "" {
		corpus = builtinCorpus
	}
	return TrainTokenizer(corpus, c.Vocab)
}
