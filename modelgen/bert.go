package modelgen

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"

	"github.com/empo2/empo2/gguf"
)

// BERT special tokens (WordPiece, as bert-base-uncased / all-MiniLM-L6-v2).
const (
	BERTPad  = "[PAD]"
	BERTUnk  = "[UNK]"
	BERTCls  = "[CLS]"
	BERTSep  = "[SEP]"
	BERTMask = "[MASK]"
)

// BERTSpecials are the first five tokens of every generated BERT vocabulary,
// ids 0..4 in this order.
var BERTSpecials = []string{BERTPad, BERTUnk, BERTCls, BERTSep, BERTMask}

// BERTLayerNormEps is bert.attention.layer_norm_epsilon (as BERT/MiniLM).
const BERTLayerNormEps = 1e-12

// BERTConfig describes a tiny BERT-architecture embedding model (llama.cpp
// architecture "bert", as all-MiniLM-L6-v2 converted to GGUF): learned
// absolute position embeddings, post-LayerNorm blocks with biases, GELU
// FFN, non-causal attention, mean pooling, a WordPiece vocabulary.
type BERTConfig struct {
	Layers, Hidden, Heads, FFN, Vocab, Ctx int
	Seed                                   int64
	DType                                  string // "f32" (default) | "f16"
	Corpus                                 string // WordPiece training text; "" = built-in corpus
	Name                                   string // general.name; "" = "empo2-tiny-bert"
}

// DefaultBERTConfig is a tiny embedding model: 2 layers, hidden 64, 4 heads,
// FFN 128, vocab 1024, 128 positions, f32.
func DefaultBERTConfig() BERTConfig {
	return BERTConfig{Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 1024, Ctx: 128, Seed: 1, DType: "f32"}
}

func (c BERTConfig) withDefaults() BERTConfig {
	if c.DType == "" {
		c.DType = "f32"
	}
	if c.Name == "" {
		c.Name = "empo2-tiny-bert"
	}
	return c
}

// Validate reports the first problem with c (wrapping ErrConfig).
func (c BERTConfig) Validate() error {
	c = c.withDefaults()
	if err := checkShape(c.Layers, c.Hidden, c.Heads, c.DType,
		dim{"ffn", c.FFN}, dim{"vocab", c.Vocab}, dim{"ctx", c.Ctx}); err != nil {
		return err
	}
	if c.Vocab < len(BERTSpecials)+2 {
		return configError("vocab %d must be at least %d (%d specials + 2 pieces)", c.Vocab, len(BERTSpecials)+2, len(BERTSpecials))
	}
	return checkTensorSizes(c.Hidden, c.Vocab, c.FFN, c.Ctx)
}

// ParamCount is the number of parameters of the model c describes.
func (c BERTConfig) ParamCount() int64 {
	h, f, v, p := int64(c.Hidden), int64(c.FFN), int64(c.Vocab), int64(c.Ctx)
	perLayer := 4*(h*h+h) + // q, k, v, o
		2*h + // attn_output_norm
		h*f + f + f*h + h + // ffn
		2*h // layer_output_norm
	return v*h + 2*h + p*h + 2*h + int64(c.Layers)*perLayer
}

// WordPiece is a WordPiece vocabulary in two spellings: HF holds the
// tokens as in a Hugging Face vocab.txt (continuation pieces start with
// "##"); GGUF holds them as llama.cpp's converter writes
// tokenizer.ggml.tokens for a "bert" model: special tokens ("[...]") as
// they are, a continuation piece without its "##", a word-initial piece
// prefixed with U+2581 "▁" (llama.cpp's WPM tokenizer prepends that phantom
// space to every word and matches longest pieces greedily).
type WordPiece struct {
	HF    []string
	GGUF  []string
	Types []int32
}

// wpmWords splits text into words the way llama.cpp's WPM preprocessing
// does (without its NFD normalization): lower case, whitespace separates
// words, and every punctuation character (or ASCII symbol) is a word of
// its own; control characters are dropped.
func wpmWords(text string) []string {
	var words []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			words = append(words, cur.String())
			cur.Reset()
		}
	}
	for _, r := range text {
		switch {
		case unicode.IsSpace(r):
			flush()
		case r == 0 || r == unicode.ReplacementChar || unicode.IsControl(r):
		case unicode.IsPunct(r) || (r < 0x7f && unicode.IsSymbol(r)):
			flush()
			words = append(words, string(unicode.ToLower(r)))
		default:
			cur.WriteRune(unicode.ToLower(r))
		}
	}
	flush()
	return words
}

// TrainWordPiece builds a WordPiece vocabulary of exactly size tokens from
// corpus, deterministically: the five BERT specials, then every character
// of the corpus both as a word start and as a "##" continuation (most
// frequent first), then whole words by frequency (then alphabetically),
// then frequent continuation pieces of 2–4 characters; if the corpus runs
// out, "[unusedN]" tokens (type unused) fill the rest, as in BERT's own
// vocabulary. With greedy longest-match tokenization every word of the
// corpus is representable once its characters are in the vocabulary.
func TrainWordPiece(corpus string, size int) (*WordPiece, error) {
	if size < len(BERTSpecials)+2 {
		return nil, fmt.Errorf("%w: vocab %d too small", ErrConfig, size)
	}
	words := wpmWords(corpus)
	if len(words) == 0 {
		return nil, fmt.Errorf("%w: empty corpus", ErrConfig)
	}
	wordFreq := map[string]int{}
	charFreq := map[string]int{}
	pieceFreq := map[string]int{}
	for _, w := range words {
		wordFreq[w]++
		rs := []rune(w)
		for i, r := range rs {
			charFreq[string(r)]++
			if i == 0 {
				continue
			}
			for n := 2; n <= 4 && i+n <= len(rs); n++ {
				pieceFreq[string(rs[i:i+n])]++
			}
		}
	}
	byFreq := func(m map[string]int, minCount int, keep func(string) bool) []string {
		var out []string
		for k, n := range m {
			if n >= minCount && keep(k) {
				out = append(out, k)
			}
		}
		sort.Slice(out, func(i, j int) bool {
			if m[out[i]] != m[out[j]] {
				return m[out[i]] > m[out[j]]
			}
			return out[i] < out[j]
		})
		return out
	}
	wp := &WordPiece{}
	seen := map[string]bool{}
	add := func(hf string, typ int32) bool {
		if len(wp.HF) >= size {
			return false
		}
		if seen[hf] {
			return true
		}
		seen[hf] = true
		wp.HF = append(wp.HF, hf)
		wp.Types = append(wp.Types, typ)
		return true
	}
	for _, s := range BERTSpecials {
		add(s, gguf.TokenTypeControl)
	}
	all := func(string) bool { return true }
	for _, c := range byFreq(charFreq, 1, all) {
		if !add(c, gguf.TokenTypeNormal) || !add("##"+c, gguf.TokenTypeNormal) {
			break
		}
	}
	multi := func(s string) bool { return len([]rune(s)) > 1 }
	for _, w := range byFreq(wordFreq, 2, multi) {
		if !add(w, gguf.TokenTypeNormal) {
			break
		}
	}
	for _, p := range byFreq(pieceFreq, 2, all) {
		if !add("##"+p, gguf.TokenTypeNormal) {
			break
		}
	}
	for i := 0; len(wp.HF) < size; i++ {
		add(fmt.Sprintf("[unused%d]", i), gguf.TokenTypeUnused)
	}
	wp.GGUF = make([]string, len(wp.HF))
	for i, t := range wp.HF {
		wp.GGUF[i] = wordPieceToGGUF(t)
	}
	return wp, nil
}

// wordPieceToGGUF spells a vocab.txt token as llama.cpp's converter does
// (convert_hf_to_gguf.py, BertModel: "phantom").
func wordPieceToGGUF(t string) string {
	if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
		return t
	}
	if strings.HasPrefix(t, "##") {
		return t[2:]
	}
	return "\u2581" + t
}

// Encode tokenizes text as llama.cpp's WPM tokenizer does (for text
// without combining characters, which llama.cpp's NFD step would split):
// [CLS], per word the longest-match pieces (a word with any unmatched
// part becomes [UNK]), [SEP].
func (wp *WordPiece) Encode(text string) []int32 {
	ids := make(map[string]int32, len(wp.GGUF))
	maxLen := 0
	for i, t := range wp.GGUF {
		ids[t] = int32(i)
		maxLen = max(maxLen, len(t))
	}
	out := []int32{2} // [CLS]
	for _, w := range wpmWords(text) {
		w1 := "\u2581" + w
		start := len(out)
		ok := true
		for i := 0; i < len(w1); {
			found := false
			for j := min(len(w1), i+maxLen); j > i; j-- {
				if id, hit := ids[w1[i:j]]; hit {
					out = append(out, id)
					i, found = j, true
					break
				}
			}
			if !found {
				ok = false
				break
			}
		}
		if !ok || len(out) == start {
			out = append(out[:start], 1) // [UNK]
		}
	}
	return append(out, 3) // [SEP]
}

func (c BERTConfig) tensors() []tensorSpec {
	h, f, v, p := uint64(c.Hidden), uint64(c.FFN), uint64(c.Vocab), uint64(c.Ctx)
	std := func(fanIn uint64) float64 { return 1 / math.Sqrt(float64(fanIn)) }
	bias := func(fanIn uint64) float64 { return 0.1 * std(fanIn) }
	ts := []tensorSpec{
		{"token_embd.weight", []uint64{h, v}, kindMatrix, std(h)},
		{"token_types.weight", []uint64{h, 2}, kindMatrix, std(h)},
		{"position_embd.weight", []uint64{h, p}, kindMatrix, std(h)},
		{"token_embd_norm.weight", []uint64{h}, kindNorm, 0},
		{"token_embd_norm.bias", []uint64{h}, kindZero, 0},
	}
	for i := 0; i < c.Layers; i++ {
		b := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			tensorSpec{b + "attn_q.weight", []uint64{h, h}, kindMatrix, std(h)},
			tensorSpec{b + "attn_q.bias", []uint64{h}, kindBias, bias(h)},
			tensorSpec{b + "attn_k.weight", []uint64{h, h}, kindMatrix, std(h)},
			tensorSpec{b + "attn_k.bias", []uint64{h}, kindBias, bias(h)},
			tensorSpec{b + "attn_v.weight", []uint64{h, h}, kindMatrix, std(h)},
			tensorSpec{b + "attn_v.bias", []uint64{h}, kindBias, bias(h)},
			tensorSpec{b + "attn_output.weight", []uint64{h, h}, kindMatrix, std(h)},
			tensorSpec{b + "attn_output.bias", []uint64{h}, kindBias, bias(h)},
			tensorSpec{b + "attn_output_norm.weight", []uint64{h}, kindNorm, 0},
			tensorSpec{b + "attn_output_norm.bias", []uint64{h}, kindZero, 0},
			tensorSpec{b + "ffn_up.weight", []uint64{h, f}, kindMatrix, std(h)},
			tensorSpec{b + "ffn_up.bias", []uint64{f}, kindBias, bias(h)},
			tensorSpec{b + "ffn_down.weight", []uint64{f, h}, kindMatrix, std(f)},
			tensorSpec{b + "ffn_down.bias", []uint64{h}, kindBias, bias(f)},
			tensorSpec{b + "layer_output_norm.weight", []uint64{h}, kindNorm, 0},
			tensorSpec{b + "layer_output_norm.bias", []uint64{h}, kindZero, 0},
		)
	}
	return ts
}

// WriteBERT generates the BERT embedding model cfg describes and writes it
// to path (atomically). The file loads in llama.cpp as architecture "bert"
// (encoder-only, mean pooling), like a converted all-MiniLM-L6-v2.
func WriteBERT(path string, cfg BERTConfig) error {
	w, err := NewBERTWriter(cfg)
	if err != nil {
		return err
	}
	if err := w.WriteFile(path); err != nil {
		return fmt.Errorf("modelgen: %w", err)
	}
	return nil
}

// Tokenizer trains and returns the WordPiece vocabulary cfg's model gets.
func (c BERTConfig) Tokenizer() (*WordPiece, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	corpus := c.Corpus
	if corpus == "" {
		corpus = builtinCorpus
	}
	return TrainWordPiece(corpus, c.Vocab)
}

// NewBERTWriter returns a gguf.Writer holding the BERT model's metadata and
// lazily generated tensors.
func NewBERTWriter(cfg BERTConfig) (*gguf.Writer, error) {
	tok, err := cfg.Tokenizer()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f16 := cfg.DType == "f16"
	w := newModelWriter(modelHeader{arch: "bert", name: cfg.Name, f16: f16,
		description: fmt.Sprintf("random-weight tiny BERT embedding model generated by empo2 modelgen (seed %d)", cfg.Seed),
		layers:      cfg.Layers, ctx: cfg.Ctx, hidden: cfg.Hidden, ffn: cfg.FFN, heads: cfg.Heads})
	w.AddKV("bert.attention.layer_norm_epsilon", float32(BERTLayerNormEps))
	w.AddKV("bert.attention.causal", false)
	w.AddKV("bert.pooling_type", uint32(1)) // LLAMA_POOLING_TYPE_MEAN
	w.AddKV("empo2.modelgen.seed", cfg.Seed)
	w.AddKV("tokenizer.ggml.model", "bert")
	w.AddKV("tokenizer.ggml.tokens", tok.GGUF)
	w.AddKV("tokenizer.ggml.token_type", tok.Types)
	w.AddKV("tokenizer.ggml.token_type_count", uint32(2))
	// llama.cpp's WPM tokenizer starts a sequence with the BOS id and ends
	// it with the SEP id; it does not read cls_token_id (written anyway, as
	// the converter does)
	w.AddKV("tokenizer.ggml.bos_token_id", uint32(2))
	w.AddKV("tokenizer.ggml.cls_token_id", uint32(2))
	w.AddKV("tokenizer.ggml.seperator_token_id", uint32(3))
	w.AddKV("tokenizer.ggml.padding_token_id", uint32(0))
	w.AddKV("tokenizer.ggml.unknown_token_id", uint32(1))
	w.AddKV("tokenizer.ggml.mask_token_id", uint32(4))
	if err := addGenTensors(w, cfg.tensors(), cfg.Seed, func(t tensorSpec) bool {
		// token_types stays F32, as llama.cpp's converter writes it: the
		// bert graph adds its row 0 with ggml_add, which on the CPU does
		// not take an F16 operand (the process aborts)
		return f16 && t.kind == kindMatrix && len(t.shape) == 2 && t.name != "token_types.weight"
	}); err != nil {
		return nil, err
	}
	return w, nil
}
