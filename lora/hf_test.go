package lora_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/safetensors"
)

// hfExpected lists transformers' Qwen2ForCausalLM parameters of the default
// modelgen config with their torch shapes, written down from the
// architecture (hidden 64, kv dim 32, ffn 128, vocab 512, 2 layers).
func hfExpected(tied bool) map[string][]int {
	m := map[string][]int{"model.embed_tokens.weight": {512, 64}, "model.norm.weight": {64}}
	if !tied {
		m["lm_head.weight"] = []int{512, 64}
	}
	for l := 0; l < 2; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		for k, v := range map[string][]int{
			"input_layernorm.weight": {64}, "post_attention_layernorm.weight": {64},
			"self_attn.q_proj.weight": {64, 64}, "self_attn.q_proj.bias": {64},
			"self_attn.k_proj.weight": {32, 64}, "self_attn.k_proj.bias": {32},
			"self_attn.v_proj.weight": {32, 64}, "self_attn.v_proj.bias": {32},
			"self_attn.o_proj.weight": {64, 64},
			"mlp.gate_proj.weight":    {128, 64}, "mlp.up_proj.weight": {128, 64}, "mlp.down_proj.weight": {64, 128},
		} {
			m[p+k] = v
		}
	}
	return m
}

// TestHFExportMerged: config.json carries the model's hyperparameters, the
// weights have transformers' names and [out, in] shapes, unadapted tensors
// are the GGUF's bytes, adapted ones equal llama.cpp-format merging
// (lora.Merge) bit for bit and W + (alpha/r)·B·A computed here from the
// PEFT export's [r, in] / [out, r] tensors.
func TestHFExportMerged(t *testing.T) {
	_, base := tinyBase(t, nil)
	a := initAdapter(t, base, 4, 8, []string{"q", "k", "down"}, 5)
	dir := t.TempDir()
	hf := filepath.Join(dir, "hf")
	if err := lora.ExportHF(base, a, hf, lora.HFOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range lora.HFFiles {
		if _, err := os.Stat(filepath.Join(hf, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(hf, "config.json"))
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"model_type": "qwen2", "hidden_size": 64.0, "intermediate_size": 128.0, "num_hidden_layers": 2.0,
		"num_attention_heads": 4.0, "num_key_value_heads": 2.0, "max_position_embeddings": 512.0,
		"vocab_size": 512.0, "rope_theta": 1e6, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
		"hidden_act": "silu", "torch_dtype": "float32",
	} {
		if cfg[k] != want {
			t.Errorf("config.json %s = %v, want %v", k, cfg[k], want)
		}
	}
	if fmt.Sprint(cfg["architectures"]) != "[Qwen2ForCausalLM]" {
		t.Errorf("architectures %v", cfg["architectures"])
	}
	if !bytes.Contains(raw, []byte(`"rms_norm_eps": 1e-06`)) {
		t.Errorf("rms_norm_eps not written as the float32's short decimal: %s", raw)
	}

	st := readST(t, filepath.Join(hf, "model.safetensors"))
	if st.meta["format"] != "pt" {
		t.Errorf("metadata %v: transformers needs format=pt", st.meta)
	}
	want := hfExpected(false)
	if len(st.tensors) != len(want) {
		t.Errorf("%d tensors, want %d", len(st.tensors), len(want))
	}
	for name, shape := range want {
		got, ok := st.tensors[name]
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if fmt.Sprint(got.shape) != fmt.Sprint(shape) || got.dtype != "F32" {
			t.Errorf("%s: %s %v, want F32 %v", name, got.dtype, got.shape, shape)
		}
	}

	// The same merge in llama.cpp's format.
	mergedPath := filepath.Join(dir, "merged.gguf")
	if err := lora.Merge(base, a, mergedPath, gguf.TypeF32); err != nil {
		t.Fatal(err)
	}
	merged, err := gguf.Open(mergedPath)
	if err != nil {
		t.Fatal(err)
	}
	defer merged.Close()
	peft := filepath.Join(dir, "peft")
	if err := lora.ExportPEFT(a, base, peft, lora.PEFTOptions{}); err != nil {
		t.Fatal(err)
	}
	pst := readST(t, filepath.Join(peft, "adapter_model.safetensors"))
	adapted := 0
	for _, ti := range base.Tensors {
		name := ti.Name
		// transformers name of the GGUF tensor, from the table of
		// convert_hf_to_gguf's Qwen2 mapping, written out here.
		hfName := strings.NewReplacer("blk.", "model.layers.", "attn_norm", "input_layernorm", "ffn_norm", "post_attention_layernorm",
			"attn_q", "self_attn.q_proj", "attn_k", "self_attn.k_proj", "attn_v", "self_attn.v_proj", "attn_output", "self_attn.o_proj",
			"ffn_gate", "mlp.gate_proj", "ffn_up", "mlp.up_proj", "ffn_down", "mlp.down_proj").Replace(name)
		switch name {
		case "token_embd.weight":
			hfName = "model.embed_tokens.weight"
		case "output_norm.weight":
			hfName = "model.norm.weight"
		case "output.weight":
			hfName = "lm_head.weight"
		}
		got := st.tensors[hfName]
		mraw, err := merged.ReadTensorRaw(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.data, mraw) {
			t.Errorf("%s (%s): bytes differ from the llama.cpp-format merge", hfName, name)
		}
		p := a.Pair(name)
		if p == nil {
			braw, _ := base.ReadTensorRaw(name)
			if !bytes.Equal(got.data, braw) {
				t.Errorf("%s: unadapted tensor changed", hfName)
			}
			continue
		}
		adapted++
		// W + s·B·A with PEFT's orientation: B [out, r], A [r, in].
		mod := strings.TrimSuffix(hfName, ".weight")
		A := pst.tensors["base_model.model."+mod+".lora_A.weight"]
		B := pst.tensors["base_model.model."+mod+".lora_B.weight"]
		av, bv, wv := A.f32s(t), B.f32s(t), got.f32s(t)
		w0, _ := base.ReadTensorF32(name)
		r, in, out := A.shape[0], A.shape[1], B.shape[0]
		if fmt.Sprint([]int{out, in}) != fmt.Sprint(got.shape) {
			t.Fatalf("%s: PEFT [out %d, in %d] vs weight %v", mod, out, in, got.shape)
		}
		s := 8.0 / 4.0
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				d := 0.0
				for k := 0; k < r; k++ {
					d += float64(bv[o*r+k]) * float64(av[k*in+i])
				}
				if e := float64(w0[o*in+i]) + s*d; math.Abs(e-float64(wv[o*in+i])) > 1e-5 {
					t.Fatalf("%s[%d][%d] = %v, want W + s·B·A = %v", hfName, o, i, wv[o*in+i], e)
				}
			}
		}
	}
	if adapted != 6 {
		t.Errorf("%d adapted tensors checked, want 6", adapted)
	}
}

// TestHFExportDTypeAndTied: an F16 base stays F16 by default, a tied model
// has no lm_head and says tie_word_embeddings, --type overrides the dtype.
func TestHFExportDTypeAndTied(t *testing.T) {
	_, base := tinyBase(t, func(c *modelgen.Config) { c.DType = "f16"; c.TiedEmbeddings = true })
	a := initAdapter(t, base, 2, 4, []string{"v"}, 1)
	hf := filepath.Join(t.TempDir(), "hf")
	if err := lora.ExportHF(base, a, hf, lora.HFOptions{}); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	readJSON(t, filepath.Join(hf, "config.json"), &cfg)
	if cfg["torch_dtype"] != "float16" || cfg["tie_word_embeddings"] != true {
		t.Errorf("torch_dtype %v tie %v", cfg["torch_dtype"], cfg["tie_word_embeddings"])
	}
	st := readST(t, filepath.Join(hf, "model.safetensors"))
	want := hfExpected(true)
	if len(st.tensors) != len(want) {
		t.Errorf("%d tensors, want %d (no lm_head)", len(st.tensors), len(want))
	}
	for name := range want {
		if st.tensors[name].dtype != "F16" {
			t.Errorf("%s is %s, want F16", name, st.tensors[name].dtype)
		}
	}
	raw, _ := base.ReadTensorRaw("blk.1.ffn_up.weight")
	if !bytes.Equal(raw, st.tensors["model.layers.1.mlp.up_proj.weight"].data) {
		t.Error("an unadapted F16 matrix is not the GGUF's bytes")
	}
	hf2 := filepath.Join(t.TempDir(), "hf")
	if err := lora.ExportHF(base, a, hf2, lora.HFOptions{DType: safetensors.BF16}); err != nil {
		t.Fatal(err)
	}
	if d := readST(t, filepath.Join(hf2, "model.safetensors")).tensors["model.norm.weight"].dtype; d != "BF16" {
		t.Errorf("override: %s", d)
	}
	// not a qwen2 model
	bp := filepath.Join(t.TempDir(), "bert.gguf")
	if err := modelgen.WriteBERT(bp, modelgen.DefaultBERTConfig()); err != nil {
		t.Fatal(err)
	}
	bf, err := gguf.Open(bp)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	if err := lora.ExportHF(bf, nil, t.TempDir(), lora.HFOptions{}); !errors.Is(err, lora.ErrUnsupported) {
		t.Errorf("bert: %v, want ErrUnsupported", err)
	}
}

// TestHFTokenizerFiles: tokenizer.json holds every GGUF token under its id
// exactly once (special tokens as added tokens), the merges in order, the
// Qwen2 split regex and byte-level decoding; tokenizer_config.json carries
// the chat template and special tokens.
func TestHFTokenizerFiles(t *testing.T) {
	_, base := tinyBase(t, nil)
	hf := filepath.Join(t.TempDir(), "hf")
	if err := lora.ExportHF(base, nil, hf, lora.HFOptions{}); err != nil {
		t.Fatal(err)
	}
	var tj struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		PreTokenizer struct {
			Pretokenizers []map[string]any `json:"pretokenizers"`
		} `json:"pre_tokenizer"`
		Decoder map[string]any `json:"decoder"`
		Model   struct {
			Type   string         `json:"type"`
			Vocab  map[string]int `json:"vocab"`
			Merges []string       `json:"merges"`
		} `json:"model"`
	}
	readJSON(t, filepath.Join(hf, "tokenizer.json"), &tj)
	toks, _ := base.Strings("tokenizer.ggml.tokens")
	merges, _ := base.Strings("tokenizer.ggml.merges")
	byID := map[int]string{}
	for tok, id := range tj.Model.Vocab {
		if _, dup := byID[id]; dup {
			t.Errorf("id %d twice", id)
		}
		byID[id] = tok
	}
	special := map[string]bool{}
	for _, at := range tj.AddedTokens {
		if _, dup := byID[at.ID]; dup {
			t.Errorf("added token id %d is also in the vocab", at.ID)
		}
		byID[at.ID] = at.Content
		special[at.Content] = at.Special
	}
	if len(byID) != len(toks) {
		t.Errorf("%d ids, GGUF has %d tokens", len(byID), len(toks))
	}
	for id, tok := range toks {
		if byID[id] != tok {
			t.Fatalf("id %d: %q, GGUF %q", id, byID[id], tok)
		}
	}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		if !special[s] {
			t.Errorf("%s is not a special added token", s)
		}
	}
	if tj.Model.Type != "BPE" || strings.Join(tj.Model.Merges, "\n") != strings.Join(merges, "\n") {
		t.Errorf("model %s, merges differ", tj.Model.Type)
	}
	if len(tj.PreTokenizer.Pretokenizers) != 2 || tj.PreTokenizer.Pretokenizers[1]["type"] != "ByteLevel" ||
		!strings.Contains(fmt.Sprint(tj.PreTokenizer.Pretokenizers[0]["pattern"]), `\p{L}`) || tj.Decoder["type"] != "ByteLevel" {
		t.Errorf("pre-tokenizer %v decoder %v", tj.PreTokenizer.Pretokenizers, tj.Decoder)
	}
	var tc map[string]any
	readJSON(t, filepath.Join(hf, "tokenizer_config.json"), &tc)
	if tc["chat_template"] != modelgen.ChatTemplate() || tc["eos_token"] != "<|im_end|>" || tc["add_bos_token"] != false {
		t.Errorf("tokenizer_config: eos %v add_bos %v template equal %v", tc["eos_token"], tc["add_bos_token"], tc["chat_template"] == modelgen.ChatTemplate())
	}
	var vocab map[string]int
	readJSON(t, filepath.Join(hf, "vocab.json"), &vocab)
	if len(vocab) != len(toks) {
		t.Errorf("vocab.json has %d entries", len(vocab))
	}
	mt, _ := os.ReadFile(filepath.Join(hf, "merges.txt"))
	lines := strings.Split(strings.TrimSpace(string(mt)), "\n")
	if lines[0] != "#version: 0.2" || strings.Join(lines[1:], "\n") != strings.Join(merges, "\n") {
		t.Error("merges.txt differs from the GGUF merges")
	}
	var gc map[string]any
	readJSON(t, filepath.Join(hf, "generation_config.json"), &gc)
	keys := make([]string, 0, len(gc))
	for k := range gc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if gc["eos_token_id"] == nil {
		t.Errorf("generation_config keys %v", keys)
	}
}

// hfTokenizerFolder writes a Hugging Face tokenizer folder: the files an
// export of the trained tiny model generates, tokenizer_config.json with a
// field and layout of its own (so that only a byte copy reproduces it).
func hfTokenizerFolder(t *testing.T) string {
	t.Helper()
	_, base := tinyBase(t, nil)
	dir := filepath.Join(t.TempDir(), "tok")
	if err := lora.ExportHF(base, nil, dir, lora.HFOptions{}); err != nil {
		t.Fatal(err)
	}
	var tc map[string]any
	readJSON(t, filepath.Join(dir, "tokenizer_config.json"), &tc)
	tc["x_custom"] = "kept"
	b, _ := json.Marshal(tc) // compact, unlike the export's indented JSON
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt"} {
		os.Remove(filepath.Join(dir, f))
	}
	return dir
}

// TestHFExportKeepsTokenizer: a model whose vocabulary came from a Hugging
// Face tokenizer exports that tokenizer's files byte for byte — from the
// files the GGUF stores, or from HFOptions.Tokenizer for a GGUF without them
// — and removes generated tokenizer files an earlier export left; a
// tokenizer that is not the GGUF's vocabulary is refused.
func TestHFExportKeepsTokenizer(t *testing.T) {
	src := hfTokenizerFolder(t)
	tok, err := modelgen.LoadHFTokenizer(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.Files) != 3 { // tokenizer.json, tokenizer_config.json, special_tokens_map.json
		t.Fatalf("%d files", len(tok.Files))
	}
	_, base := tinyBase(t, func(c *modelgen.Config) { c.HFTokenizer, c.Vocab = tok, 520 })
	a := initAdapter(t, base, 2, 4, []string{"q"}, 1)
	same := func(dir string) {
		t.Helper()
		for _, f := range tok.Files {
			got, err := os.ReadFile(filepath.Join(dir, f.Name))
			want, _ := os.ReadFile(filepath.Join(src, f.Name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s differs from the original (%v)", f.Name, err)
			}
		}
	}
	hf := filepath.Join(t.TempDir(), "hf")
	os.MkdirAll(hf, 0o755)
	os.WriteFile(filepath.Join(hf, "merges.txt"), []byte("stale"), 0o644)
	if err := lora.ExportHF(base, a, hf, lora.HFOptions{}); err != nil {
		t.Fatal(err)
	}
	same(hf)
	for _, f := range []string{"merges.txt", "vocab.json"} {
		if _, err := os.Stat(filepath.Join(hf, f)); err == nil {
			t.Errorf("%s left beside the original tokenizer", f)
		}
	}
	var cfg map[string]any
	readJSON(t, filepath.Join(hf, "config.json"), &cfg)
	if cfg["vocab_size"] != 520.0 {
		t.Errorf("vocab_size %v", cfg["vocab_size"])
	}

	// a GGUF without the files (as llama.cpp's converter writes it)
	bare := *tok
	bare.Files = nil
	_, conv := tinyBase(t, func(c *modelgen.Config) { c.HFTokenizer, c.Vocab = &bare, 520 })
	gen := filepath.Join(t.TempDir(), "gen")
	if err := lora.ExportHF(conv, nil, gen, lora.HFOptions{}); err != nil {
		t.Fatal(err)
	}
	// generated: the padding is not part of the Hugging Face vocabulary
	var tj struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	readJSON(t, filepath.Join(gen, "tokenizer.json"), &tj)
	var vj map[string]int
	readJSON(t, filepath.Join(gen, "vocab.json"), &vj)
	if _, ok := tj.Model.Vocab["[PAD515]"]; ok || len(tj.Model.Vocab) != 509 || len(vj) != 512 {
		t.Errorf("generated vocab has %d entries (vocab.json %d); want the 509 BPE tokens (+3 added)", len(tj.Model.Vocab), len(vj))
	}
	back, err := modelgen.LoadHFTokenizer(gen)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Matches(conv); err != nil {
		t.Errorf("generated files do not convert back to the GGUF's vocabulary: %v", err)
	}
	withTok := filepath.Join(t.TempDir(), "with")
	if err := lora.ExportHF(conv, nil, withTok, lora.HFOptions{Tokenizer: tok}); err != nil {
		t.Fatal(err)
	}
	same(withTok)

	// the trained 512-token model's vocabulary is this tokenizer's (it was
	// made from it); a 600-token one, with more merges, is not
	_, same512 := tinyBase(t, nil)
	if err := tok.Matches(same512); err != nil {
		t.Error(err)
	}
	_, trained := tinyBase(t, func(c *modelgen.Config) { c.Vocab = 600 })
	if err := lora.ExportHF(trained, nil, t.TempDir(), lora.HFOptions{Tokenizer: tok}); !errors.Is(err, lora.ErrMismatch) {
		t.Errorf("mismatched tokenizer: %v", err)
	}
}
