package modelgen

import "sort"

// Preset is the shape of a real model: its config.json's dimensions, and
// the special token ids its config.json gives llama.cpp's converter. A
// preset model gets random weights; with a Hugging Face tokenizer, the real
// vocabulary padded to the real vocab_size.
type Preset struct {
	Name string
	// Config holds Layers, Hidden, Heads, KVHeads, FFN, Vocab, Ctx, RopeBase
	// and TiedEmbeddings (every preset's rms_norm_eps is RMSNormEps).
	Config Config
	// TokenIDs are config.json's bos_token_id and eos_token_id, which the
	// converter uses for the kinds tokenizer_config.json leaves unset.
	TokenIDs map[string]int
}

// presets are the config.json values of Qwen/Qwen2.5-{0.5B,1.5B,3B,7B}-Instruct
// (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// intermediate_size, vocab_size, max_position_embeddings, rope_theta 1e6,
// rms_norm_eps 1e-6, tie_word_embeddings, bos_token_id 151643,
// eos_token_id 151645); docs/models.md says where they were read.
var presets = []Preset{
	{"qwen2.5-0.5b", Config{Layers: 24, Hidden: 896, Heads: 14, KVHeads: 2, FFN: 4864, Vocab: 151936, Ctx: 32768, RopeBase: 1e6, TiedEmbeddings: true}, qwenIDs},
	{"qwen2.5-1.5b", Config{Layers: 28, Hidden: 1536, Heads: 12, KVHeads: 2, FFN: 8960, Vocab: 151936, Ctx: 32768, RopeBase: 1e6, TiedEmbeddings: true}, qwenIDs},
	{"qwen2.5-3b", Config{Layers: 36, Hidden: 2048, Heads: 16, KVHeads: 2, FFN: 11008, Vocab: 151936, Ctx: 32768, RopeBase: 1e6, TiedEmbeddings: true}, qwenIDs},
	{"qwen2.5-7b", Config{Layers: 28, Hidden: 3584, Heads: 28, KVHeads: 4, FFN: 18944, Vocab: 152064, Ctx: 32768, RopeBase: 1e6, TiedEmbeddings: false}, qwenIDs},
}

// qwenIDs are <|endoftext|> and <|im_end|> in Qwen2.5's vocabulary.
var qwenIDs = map[string]int{"bos": 151643, "eos": 151645}

// LookupPreset returns the preset of that name (its TokenIDs a copy).
func LookupPreset(name string) (Preset, bool) {
	for _, p := range presets {
		if p.Name == name {
			ids := make(map[string]int, len(p.TokenIDs))
			for k, v := range p.TokenIDs {
				ids[k] = v
			}
			p.TokenIDs = ids
			return p, true
		}
	}
	return Preset{}, false
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	sort.Strings(names)
	return names
}
