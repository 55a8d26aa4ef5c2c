package lora

// Hugging Face interop, part 1: tensor names between llama.cpp's Qwen2 GGUF
// and transformers' Qwen2ForCausalLM, and a merged model folder that
// transformers loads (ExportHF). peft.go builds on the names.
//
// Orientation. A GGUF weight with ggml ne = [in, out] is stored as out rows of
// in values; torch's nn.Linear weight has shape [out, in], stored row-major:
// the same bytes. So a tensor converts by reversing its shape and copying its
// data. llama.cpp's converter (convert_hf_to_gguf.py, class Qwen2Model, and
// the pinned module's convert/convert_qwen2.go) does exactly that for Qwen2:
// unlike the llama architecture (LlamaModel.modify_tensors permutes the q and
// k rows for llama.cpp's non-NeoX RoPE), Qwen2 uses NeoX-style RoPE in both
// stacks and its q/k rows are not permuted, so none are un-permuted here.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/safetensors"
)

// hfBlock maps a tensor of block N ("blk.N.<key>") to its transformers name
// under "model.layers.N.".
var hfBlock = map[string]string{
	"attn_norm.weight":   "input_layernorm.weight",
	"attn_q.weight":      "self_attn.q_proj.weight",
	"attn_q.bias":        "self_attn.q_proj.bias",
	"attn_k.weight":      "self_attn.k_proj.weight",
	"attn_k.bias":        "self_attn.k_proj.bias",
	"attn_v.weight":      "self_attn.v_proj.weight",
	"attn_v.bias":        "self_attn.v_proj.bias",
	"attn_output.weight": "self_attn.o_proj.weight",
	"ffn_norm.weight":    "post_attention_layernorm.weight",
	"ffn_gate.weight":    "mlp.gate_proj.weight",
	"ffn_up.weight":      "mlp.up_proj.weight",
	"ffn_down.weight":    "mlp.down_proj.weight",
}

// hfGlobal maps the tensors outside the blocks.
var hfGlobal = map[string]string{
	"token_embd.weight":  "model.embed_tokens.weight",
	"output_norm.weight": "model.norm.weight",
	"output.weight":      "lm_head.weight",
}

// HFTensorName returns the transformers Qwen2ForCausalLM parameter name of a
// llama.cpp Qwen2 tensor ("blk.3.attn_q.weight" →
// "model.layers.3.self_attn.q_proj.weight"); ok is false for names without
// one.
func HFTensorName(name string) (string, bool) {
	if h, ok := hfGlobal[name]; ok {
		return h, true
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return "", false
	}
	blk, key, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if n, err := strconv.Atoi(blk); err != nil || n < 0 || strconv.Itoa(n) != blk {
		return "", false
	}
	h, ok := hfBlock[key]
	if !ok {
		return "", false
	}
	return "model.layers." + blk + "." + h, true
}

// GGUFTensorName is the inverse of HFTensorName.
func GGUFTensorName(hf string) (string, bool) {
	for g, h := range hfGlobal {
		if h == hf {
			return g, true
		}
	}
	rest, ok := strings.CutPrefix(hf, "model.layers.")
	if !ok {
		return "", false
	}
	blk, key, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if n, err := strconv.Atoi(blk); err != nil || n < 0 || strconv.Itoa(n) != blk {
		return "", false
	}
	for g, h := range hfBlock {
		if h == key {
			return "blk." + blk + "." + g, true
		}
	}
	return "", false
}

// jsonF32 renders a float32 as the shortest decimal that reads back as the
// same float32 (1e-06, not 9.999999974752427e-07).
func jsonF32(x float32) json.Number {
	if x == float32(math.Trunc(float64(x))) && math.Abs(float64(x)) < 1e15 {
		return json.Number(strconv.FormatFloat(float64(x), 'f', -1, 32)) // 1000000, not 1e+06
	}
	return json.Number(strconv.FormatFloat(float64(x), 'g', -1, 32))
}

// HFConfig is config.json of a transformers Qwen2ForCausalLM, filled from a
// GGUF's qwen2.* metadata (field names as transformers' Qwen2Config).
type HFConfig struct {
	Architectures         []string       `json:"architectures"`
	ModelType             string         `json:"model_type"`
	HiddenSize            int            `json:"hidden_size"`
	IntermediateSize      int            `json:"intermediate_size"`
	NumHiddenLayers       int            `json:"num_hidden_layers"`
	NumAttentionHeads     int            `json:"num_attention_heads"`
	NumKeyValueHeads      int            `json:"num_key_value_heads"`
	MaxPositionEmbeddings int            `json:"max_position_embeddings"`
	RopeTheta             json.Number    `json:"rope_theta"`
	RopeScaling           map[string]any `json:"rope_scaling"`
	RMSNormEps            json.Number    `json:"rms_norm_eps"`
	VocabSize             int            `json:"vocab_size"`
	TieWordEmbeddings     bool           `json:"tie_word_embeddings"`
	HiddenAct             string         `json:"hidden_act"`
	AttentionDropout      float64        `json:"attention_dropout"`
	InitializerRange      float64        `json:"initializer_range"`
	UseCache              bool           `json:"use_cache"`
	UseSlidingWindow      bool           `json:"use_sliding_window"`
	SlidingWindow         int            `json:"sliding_window"`
	MaxWindowLayers       int            `json:"max_window_layers"`
	BOSTokenID            *int           `json:"bos_token_id"`
	EOSTokenID            *int           `json:"eos_token_id"`
	TorchDType            string         `json:"torch_dtype"`
	TransformersVersion   string         `json:"transformers_version"`
}

// hfTorchDType names a safetensors dtype as config.json's torch_dtype.
func hfTorchDType(d safetensors.DType) string {
	switch d {
	case safetensors.F16:
		return "float16"
	case safetensors.BF16:
		return "bfloat16"
	}
	return "float32"
}

func ggufUint(f *gguf.File, key string) (int, error) {
	v, ok := f.Uint64(key)
	if !ok {
		return 0, fmt.Errorf("%w: base model has no integer %s", ErrMismatch, key)
	}
	if v == 0 || v > 1<<31 {
		return 0, fmt.Errorf("%w: %s = %d", ErrMismatch, key, v)
	}
	return int(v), nil
}

func optTokenID(f *gguf.File, key string) *int {
	if v, ok := f.Uint64(key); ok && v < 1<<31 {
		i := int(v)
		return &i
	}
	return nil
}

// NewHFConfig builds config.json for a Qwen2 GGUF, with tensors in dtype.
func NewHFConfig(base *gguf.File, dtype safetensors.DType) (*HFConfig, error) {
	arch, _ := base.String(KeyArchitecture)
	if arch != "qwen2" {
		return nil, fmt.Errorf("%w: Hugging Face export supports the qwen2 architecture, the base model is %q", ErrUnsupported, arch)
	}
	c := &HFConfig{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", HiddenAct: "silu",
		InitializerRange: 0.02, UseCache: true, TorchDType: hfTorchDType(dtype), TransformersVersion: "4.45.0"}
	var err error
	for _, kv := range []struct {
		key string
		dst *int
	}{
		{"qwen2.embedding_length", &c.HiddenSize}, {"qwen2.feed_forward_length", &c.IntermediateSize},
		{"qwen2.block_count", &c.NumHiddenLayers}, {"qwen2.attention.head_count", &c.NumAttentionHeads},
		{"qwen2.context_length", &c.MaxPositionEmbeddings},
	} {
		if *kv.dst, err = ggufUint(base, kv.key); err != nil {
			return nil, err
		}
	}
	c.NumKeyValueHeads = c.NumAttentionHeads
	if _, ok := base.Uint64("qwen2.attention.head_count_kv"); ok {
		if c.NumKeyValueHeads, err = ggufUint(base, "qwen2.attention.head_count_kv"); err != nil {
			return nil, err
		}
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return nil, fmt.Errorf("%w: hidden %d, heads %d, kv heads %d do not divide", ErrMismatch, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	headDim := c.HiddenSize / c.NumAttentionHeads
	for _, k := range []string{"qwen2.attention.key_length", "qwen2.attention.value_length", "qwen2.rope.dimension_count"} {
		if v, ok := base.Uint64(k); ok && int(v) != headDim {
			return nil, fmt.Errorf("%w: %s = %d, but transformers' Qwen2 uses hidden/heads = %d", ErrUnsupported, k, v, headDim)
		}
	}
	theta, ok := base.Float32("qwen2.rope.freq_base")
	if !ok {
		theta = 10000 // llama.cpp's default
	}
	c.RopeTheta = jsonF32(theta)
	eps, ok := base.Float32("qwen2.attention.layer_norm_rms_epsilon")
	if !ok {
		return nil, fmt.Errorf("%w: base model has no qwen2.attention.layer_norm_rms_epsilon", ErrMismatch)
	}
	c.RMSNormEps = jsonF32(eps)
	if st, _ := base.String("qwen2.rope.scaling.type"); st != "" && st != "none" {
		if st != "yarn" {
			return nil, fmt.Errorf("%w: rope scaling %q", ErrUnsupported, st)
		}
		factor, _ := base.Float32("qwen2.rope.scaling.factor")
		orig, _ := base.Uint64("qwen2.rope.scaling.original_context_length")
		c.RopeScaling = map[string]any{"type": "yarn", "factor": jsonF32(factor), "original_max_position_embeddings": orig}
	}
	emb, ok := base.Tensor("token_embd.weight")
	if !ok || len(emb.Shape) != 2 || int(emb.Shape[0]) != c.HiddenSize {
		return nil, fmt.Errorf("%w: token_embd.weight missing or not [%d, vocab]", ErrMismatch, c.HiddenSize)
	}
	c.VocabSize = int(emb.Shape[1])
	_, hasOutput := base.Tensor("output.weight")
	c.TieWordEmbeddings = !hasOutput
	c.SlidingWindow = c.MaxPositionEmbeddings
	c.MaxWindowLayers = c.NumHiddenLayers
	c.BOSTokenID = optTokenID(base, "tokenizer.ggml.bos_token_id")
	c.EOSTokenID = optTokenID(base, "tokenizer.ggml.eos_token_id")
	return c, nil
}

// GGUF token types (llama_token_type).
const (
	tokNormal      = gguf.TokenTypeNormal
	tokControl     = gguf.TokenTypeControl
	tokUserDefined = gguf.TokenTypeUserDefined
	tokUnused      = gguf.TokenTypeUnused
)

type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfTokenizer struct {
	tokens     []string
	types      []int32
	merges     []string
	added      []hfAddedToken
	vocab      map[string]int
	regex      string
	pre        string
	bos, eos   *int
	pad        *int
	addBOS     bool
	template   string
	maxLength  int
	byteDecode bool
}

// readHFTokenizer reads a byte-level BPE tokenizer (tokenizer.ggml.model =
// "gpt2") from the GGUF metadata.
func readHFTokenizer(base *gguf.File, maxLength int) (*hfTokenizer, error) {
	model, _ := base.String("tokenizer.ggml.model")
	if model != "gpt2" {
		return nil, fmt.Errorf("%w: tokenizer %q (the Hugging Face export writes byte-level BPE tokenizers, tokenizer.ggml.model = \"gpt2\")", ErrUnsupported, model)
	}
	pre, _ := base.String("tokenizer.ggml.pre")
	re, ok := modelgen.PreTokenizerRegex(pre)
	if !ok {
		return nil, fmt.Errorf("%w: pre-tokenizer %q (known: qwen2, deepseek-r1-qwen, llama-bpe)", ErrUnsupported, pre)
	}
	t := &hfTokenizer{regex: re, pre: pre, maxLength: maxLength, vocab: map[string]int{}}
	if t.tokens, ok = base.Strings("tokenizer.ggml.tokens"); !ok || len(t.tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokenizer.ggml.tokens", ErrMismatch)
	}
	if t.merges, ok = base.Strings("tokenizer.ggml.merges"); !ok {
		return nil, fmt.Errorf("%w: no tokenizer.ggml.merges", ErrMismatch)
	}
	t.types = make([]int32, len(t.tokens))
	for i := range t.types {
		t.types[i] = tokNormal
	}
	if v, ok := base.Get("tokenizer.ggml.token_type"); ok {
		tt, ok := v.([]int32)
		if !ok || len(tt) != len(t.tokens) {
			return nil, fmt.Errorf("%w: tokenizer.ggml.token_type is not %d int32 values", ErrMismatch, len(t.tokens))
		}
		t.types = tt
	}
	for id, s := range t.tokens {
		switch t.types[id] {
		case tokControl, tokUserDefined:
			t.added = append(t.added, hfAddedToken{ID: id, Content: s, Special: t.types[id] == tokControl})
		case tokUnused:
			// padding up to the embedding rows ([PADn]): not in a Hugging
			// Face vocabulary, which is shorter than config.json's vocab_size
		default:
			if prev, dup := t.vocab[s]; dup {
				return nil, fmt.Errorf("%w: token %q has ids %d and %d", ErrMismatch, s, prev, id)
			}
			t.vocab[s] = id
		}
	}
	n := len(t.tokens)
	id := func(key string) *int {
		p := optTokenID(base, key)
		if p != nil && *p >= n {
			return nil
		}
		return p
	}
	t.bos, t.eos, t.pad = id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"), id("tokenizer.ggml.padding_token_id")
	t.addBOS, _ = base.Bool("tokenizer.ggml.add_bos_token")
	t.template, _ = base.String("tokenizer.chat_template")
	return t, nil
}

func (t *hfTokenizer) content(id *int) any {
	if id == nil {
		return nil
	}
	return t.tokens[*id]
}

// tokenizerJSON is tokenizer.json in the Hugging Face tokenizers format: BPE
// over GPT-2's byte-to-unicode alphabet (the GGUF stores tokens and merges in
// that alphabet already), the model's split regex, no normalizer (llama.cpp
// applies none, so both stacks tokenize every text alike).
func (t *hfTokenizer) tokenizerJSON() any {
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	added := t.added
	if added == nil {
		added = []hfAddedToken{}
	}
	return map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": t.regex}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": t.vocab, "merges": t.merges,
		},
	}
}

func (t *hfTokenizer) tokenizerConfig() any {
	dec := map[string]any{}
	for _, a := range t.added {
		dec[strconv.Itoa(a.ID)] = map[string]any{"content": a.Content, "lstrip": false, "normalized": false,
			"rstrip": false, "single_word": false, "special": a.Special}
	}
	cfg := map[string]any{
		"add_bos_token":                t.addBOS,
		"add_prefix_space":             false,
		"added_tokens_decoder":         dec,
		"bos_token":                    t.content(t.bos),
		"eos_token":                    t.content(t.eos),
		"pad_token":                    t.content(t.pad),
		"unk_token":                    nil,
		"clean_up_tokenization_spaces": false,
		"errors":                       "replace",
		"model_max_length":             t.maxLength,
		"split_special_tokens":         false,
		"tokenizer_class":              "PreTrainedTokenizerFast",
	}
	if t.pre == "qwen2" {
		cfg["tokenizer_class"] = "Qwen2Tokenizer"
	}
	if t.template != "" {
		cfg["chat_template"] = t.template
	}
	return cfg
}

func (t *hfTokenizer) specialTokensMap() any {
	m := map[string]any{}
	for k, id := range map[string]*int{"bos_token": t.bos, "eos_token": t.eos, "pad_token": t.pad} {
		if id != nil {
			m[k] = map[string]any{"content": t.tokens[*id], "lstrip": false, "normalized": false, "rstrip": false, "single_word": false}
		}
	}
	return m
}

// HFOptions configures ExportHF.
type HFOptions struct {
	// DType of every written tensor; "" keeps the base model's (the type of
	// its weight matrices: F32, F16 or BF16; mixed matrices give F32).
	DType safetensors.DType
	// Progress, when set, is called after each tensor with the bytes of
	// tensor data written so far and the total.
	Progress func(done, total int64)
	// Tokenizer, when set, is the Hugging Face tokenizer the base model's
	// vocabulary came from (modelgen.LoadHFTokenizer of its folder): its
	// files are written unchanged. Without it, the files the base GGUF
	// stores (modelgen.StoredHFTokenizer) are; a GGUF without them gets
	// tokenizer files generated from its vocabulary.
	Tokenizer *modelgen.HFTokenizer
}

// BaseDType is the dtype ExportHF keeps by default: the type shared by the
// base model's 2-D weights (F32, F16 or BF16), F32 when they differ.
func BaseDType(base *gguf.File) (safetensors.DType, error) {
	var d safetensors.DType
	for _, ti := range base.Tensors {
		if len(ti.Shape) != 2 {
			continue
		}
		var t safetensors.DType
		switch ti.Type {
		case gguf.TypeF32:
			t = safetensors.F32
		case gguf.TypeF16:
			t = safetensors.F16
		case gguf.TypeBF16:
			t = safetensors.BF16
		default:
			return "", fmt.Errorf("%w: %s is %s (the Hugging Face export reads F32, F16 and BF16 weights, not quantized ones)", ErrUnsupported, ti.Name, ti.Type)
		}
		if d == "" {
			d = t
		} else if d != t {
			return safetensors.F32, nil
		}
	}
	if d == "" {
		d = safetensors.F32
	}
	return d, nil
}

// writeJSON writes v as indented JSON to path atomically.
func writeJSON(path string, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep "<|im_end|>" readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("lora: %s: %w", path, err)
	}
	if err := safefile.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// reverse returns a ggml shape (ne0 first) as a torch shape (ne0 last).
func reverse(ne []uint64) []int64 {
	s := make([]int64, len(ne))
	for i, d := range ne {
		s[len(ne)-1-i] = int64(d)
	}
	return s
}

// HFFiles are the files ExportHF writes into its directory.
var HFFiles = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"special_tokens_map.json", "vocab.json", "merges.txt", "model.safetensors"}

// ExportHF writes a transformers-loadable Qwen2ForCausalLM folder to dir
// (through a staging folder, internal/safefile's CreateDir: a new dir
// appears complete; in an existing one the files in HFFiles are replaced
// once all are written, other files stay): config.json,
// generation_config.json, the tokenizer files and model.safetensors with
// every tensor under its transformers name, shape reversed, data as in the
// GGUF. The tokenizer files are the original Hugging Face files, byte for
// byte, when the vocabulary came from them (HFOptions.Tokenizer, or the
// files the GGUF stores) and they still convert to exactly the GGUF's
// vocabulary (else an error wrapping ErrMismatch); the tokenizer files of
// HFFiles that the original lacks are then removed from dir. Otherwise they
// are generated from the GGUF (tokenizer.json, tokenizer_config.json with
// the chat template, special_tokens_map.json, vocab.json, merges.txt). With an adapter a
// (nil for none), every adapted weight is W + s·B·A (s = Adapter.Scale,
// computed in float64 as Merge does), so transformers computes what
// llama.cpp computes with base + adapter at scale 1.
func ExportHF(base *gguf.File, a *Adapter, dir string, opt HFOptions) error {
	if a != nil {
		if err := Validate(a, base); err != nil {
			return err
		}
	}
	dtype := opt.DType
	var err error
	if dtype == "" {
		if dtype, err = BaseDType(base); err != nil {
			return err
		}
	} else if _, err := BaseDType(base); err != nil {
		return err
	}
	if dtype != safetensors.F32 && dtype != safetensors.F16 && dtype != safetensors.BF16 {
		return fmt.Errorf("%w: dtype %q (want F32, F16 or BF16)", ErrConfig, dtype)
	}
	cfg, err := NewHFConfig(base, dtype)
	if err != nil {
		return err
	}
	tok, err := readHFTokenizer(base, cfg.MaxPositionEmbeddings)
	if err != nil {
		return err
	}
	if len(tok.tokens) != cfg.VocabSize {
		return fmt.Errorf("%w: %d tokens but token_embd.weight has %d rows", ErrMismatch, len(tok.tokens), cfg.VocabSize)
	}
	orig := opt.Tokenizer
	if orig == nil {
		if orig, err = modelgen.StoredHFTokenizer(base); err != nil {
			return fmt.Errorf("%w: the tokenizer files stored in the base model: %w", ErrMismatch, err)
		}
	}
	if orig != nil {
		if err := orig.Matches(base); err != nil {
			return fmt.Errorf("%w: %w", ErrMismatch, err)
		}
		if len(orig.Files) == 0 {
			return fmt.Errorf("%w: the Hugging Face tokenizer has no files to write", ErrConfig)
		}
	}
	w := safetensors.NewWriter()
	w.Metadata = map[string]string{"format": "pt"} // transformers refuses files without it
	var total int64
	for _, ti := range base.Tensors {
		hf, ok := HFTensorName(ti.Name)
		if !ok {
			return fmt.Errorf("%w: tensor %s has no transformers Qwen2 name", ErrUnsupported, ti.Name)
		}
		ti := ti
		var p *Pair
		if a != nil {
			p = a.Pair(ti.Name)
		}
		total += int64(ti.NumElements()) * int64(dtype.Size())
		if err := w.AddFunc(hf, dtype, reverse(ti.Shape), func(out io.Writer) error {
			v, err := base.ReadTensorF32(ti.Name)
			if err != nil {
				return err
			}
			if p != nil {
				for i, d := range a.Delta(p) {
					m := float32(float64(v[i]) + d)
					if math.IsInf(float64(m), 0) || math.IsNaN(float64(m)) {
						return fmt.Errorf("%w: merged %s[%d] is not finite", ErrInvalid, ti.Name, i)
					}
					v[i] = m
				}
			}
			b, err := safetensors.Encode(dtype, v)
			if err != nil {
				return err
			}
			_, err = out.Write(b)
			return err
		}); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
	}
	out, err := safefile.CreateDir(dir)
	if err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	defer out.Abort()
	gen := map[string]any{"_from_model_config": true, "transformers_version": cfg.TransformersVersion}
	if cfg.BOSTokenID != nil {
		gen["bos_token_id"] = *cfg.BOSTokenID
	}
	if cfg.EOSTokenID != nil {
		gen["eos_token_id"] = *cfg.EOSTokenID
	}
	if tok.pad != nil {
		gen["pad_token_id"] = *tok.pad
	}
	vocab := make(map[string]int, len(tok.tokens))
	for i, s := range tok.tokens {
		if _, dup := vocab[s]; !dup && tok.types[i] != tokUnused {
			vocab[s] = i
		}
	}
	merges := "#version: 0.2\n" + strings.Join(tok.merges, "\n") + "\n"
	files := []struct {
		name string
		v    any
	}{{"config.json", cfg}, {"generation_config.json", gen}}
	if orig == nil {
		files = append(files, []struct {
			name string
			v    any
		}{
			{"tokenizer.json", tok.tokenizerJSON()}, {"tokenizer_config.json", tok.tokenizerConfig()},
			{"special_tokens_map.json", tok.specialTokensMap()}, {"vocab.json", vocab},
		}...)
	}
	for _, f := range files {
		if err := writeJSON(filepath.Join(out.Path(), f.name), f.v); err != nil {
			return err
		}
	}
	if orig == nil {
		if err := safefile.WriteFile(filepath.Join(out.Path(), "merges.txt"), []byte(merges), 0o644); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
	} else if err := writeOriginalTokenizer(out.Path(), orig.Files); err != nil {
		return err
	}
	if opt.Progress != nil {
		w.OnTensor = func(done int64) { opt.Progress(done, total) }
	}
	if err := w.WriteFile(filepath.Join(out.Path(), "model.safetensors")); err != nil {
		return fmt.Errorf("lora: writing %s: %w", filepath.Join(dir, "model.safetensors"), err)
	}
	if err := out.Commit(); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	if orig != nil {
		// generated tokenizer files an earlier export left in the folder
		// would not belong to this tokenizer
		for _, name := range HFFiles {
			if !strings.HasSuffix(name, ".safetensors") && name != "config.json" && name != "generation_config.json" && !orig.HasFile(name) {
				if err := os.Remove(filepath.Join(out.Name(), name)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("lora: %w", err)
				}
			}
		}
	}
	return nil
}

// writeOriginalTokenizer writes a Hugging Face tokenizer's files byte for
// byte into the staging folder dir.
func writeOriginalTokenizer(dir string, files []modelgen.HFFile) error {
	for _, f := range files {
		if !filepath.IsLocal(filepath.FromSlash(f.Name)) {
			return fmt.Errorf("%w: tokenizer file name %q", ErrInvalid, f.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
		if err := safefile.WriteFile(p, f.Data, 0o644); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
