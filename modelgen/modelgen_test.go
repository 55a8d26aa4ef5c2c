package modelgen

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
)

func write(t *testing.T, cfg Config) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := Write(p, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	a, _ := os.ReadFile(write(t, cfg))
	b, _ := os.ReadFile(write(t, cfg))
	if !bytes.Equal(a, b) {
		t.Fatal("same config, different files")
	}
	cfg.Seed++
	c, _ := os.ReadFile(write(t, cfg))
	if bytes.Equal(a, c) || len(a) != len(c) {
		t.Fatalf("seed change: equal=%v sizes %d %d", bytes.Equal(a, c), len(a), len(c))
	}
}

func TestMetadataAndTensors(t *testing.T) {
	for _, tc := range []struct {
		dtype string
		tied  bool
	}{{"f32", false}, {"f16", true}, {"", false}} {
		cfg := DefaultConfig()
		cfg.DType, cfg.TiedEmbeddings = tc.dtype, tc.tied
		f, err := gguf.Open(write(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		str := func(k string) string { v, _ := f.String(k); return v }
		u32 := func(k string) uint32 {
			v, ok := f.Uint32(k)
			if !ok {
				t.Fatalf("%s missing", k)
			}
			return v
		}
		if str("general.architecture") != "qwen2" || str("tokenizer.ggml.model") != "gpt2" || str("tokenizer.ggml.pre") != "qwen2" {
			t.Fatal("architecture/tokenizer keys wrong")
		}
		if u32("qwen2.block_count") != 2 || u32("qwen2.embedding_length") != 64 || u32("qwen2.attention.head_count") != 4 ||
			u32("qwen2.attention.head_count_kv") != 2 || u32("qwen2.feed_forward_length") != 128 || u32("qwen2.context_length") != 512 {
			t.Fatal("hyperparameters wrong")
		}
		wantFT := uint32(0)
		if tc.dtype == "f16" {
			wantFT = 1
		}
		if u32("general.file_type") != wantFT {
			t.Fatalf("file_type %d", u32("general.file_type"))
		}
		if v, _ := f.Float32("qwen2.rope.freq_base"); v != 1e6 {
			t.Fatalf("rope base %v", v)
		}
		if v, _ := f.Float32("qwen2.attention.layer_norm_rms_epsilon"); v != 1e-6 {
			t.Fatalf("rms eps %v", v)
		}
		toks, _ := f.Strings("tokenizer.ggml.tokens")
		types, _ := f.Get("tokenizer.ggml.token_type")
		if len(toks) != 512 || len(types.([]int32)) != 512 {
			t.Fatalf("%d tokens", len(toks))
		}
		eos := u32("tokenizer.ggml.eos_token_id")
		pad := u32("tokenizer.ggml.padding_token_id")
		if toks[eos] != TokImEnd || toks[pad] != TokEndOfText || types.([]int32)[eos] != gguf.TokenTypeControl {
			t.Fatalf("eos %d=%q pad %d=%q", eos, toks[eos], pad, toks[pad])
		}
		if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || b {
			t.Fatal("add_bos_token should be false")
		}
		if tmpl := str("tokenizer.chat_template"); !strings.Contains(tmpl, "<|im_start|>") || !strings.Contains(tmpl, "add_generation_prompt") {
			t.Fatal("chat template missing")
		}
		_, hasOut := f.Tensor("output.weight")
		if hasOut == tc.tied {
			t.Fatalf("tied=%v but output.weight present=%v", tc.tied, hasOut)
		}
		wantN := 1 + 1 + 12*2
		if !tc.tied {
			wantN++
		}
		if len(f.Tensors) != wantN {
			t.Fatalf("%d tensors, want %d", len(f.Tensors), wantN)
		}
		var params uint64
		for _, ti := range f.Tensors {
			params += ti.NumElements()
			wantType := gguf.TypeF32
			if tc.dtype == "f16" && len(ti.Shape) == 2 {
				wantType = gguf.TypeF16
			}
			if ti.Type != wantType {
				t.Errorf("%s is %s, want %s", ti.Name, ti.Type, wantType)
			}
		}
		if int64(params) != cfg.ParamCount() {
			t.Fatalf("params %d, ParamCount %d", params, cfg.ParamCount())
		}
		k, _ := f.Tensor("blk.1.attn_k.weight")
		if !reflect.DeepEqual(k.Shape, []uint64{64, 32}) {
			t.Fatalf("attn_k shape %v", k.Shape)
		}
		emb, _ := f.Tensor("token_embd.weight")
		if !reflect.DeepEqual(emb.Shape, []uint64{64, 512}) {
			t.Fatalf("token_embd shape %v", emb.Shape)
		}
		// weights: random with the fan-in scaled std; norms are ones
		w, err := f.ReadTensorF32("blk.0.ffn_down.weight")
		if err != nil {
			t.Fatal(err)
		}
		var s, ss float64
		for _, v := range w {
			s += float64(v)
			ss += float64(v) * float64(v)
		}
		mean, sd := s/float64(len(w)), math.Sqrt(ss/float64(len(w)))
		if math.Abs(mean) > 0.01 || math.Abs(sd-1/math.Sqrt(128)) > 0.01 {
			t.Fatalf("ffn_down mean %v sd %v, want ~0 and %v", mean, sd, 1/math.Sqrt(128))
		}
		n, _ := f.ReadTensorF32("output_norm.weight")
		for _, v := range n {
			if v != 1 {
				t.Fatal("norm weight != 1")
			}
		}
	}
}

func TestInitStd(t *testing.T) {
	cfg := DefaultConfig()
	cfg.InitStd = 0.5
	f, err := gguf.Open(write(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, _ := f.ReadTensorF32("blk.1.attn_q.weight")
	var ss float64
	for _, v := range w {
		ss += float64(v) * float64(v)
	}
	if sd := math.Sqrt(ss / float64(len(w))); math.Abs(sd-0.5) > 0.03 {
		t.Fatalf("sd %v, want 0.5", sd)
	}
}

func TestConfigValidation(t *testing.T) {
	mod := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	bad := map[string]Config{
		"zero layers":     mod(func(c *Config) { c.Layers = 0 }),
		"negative hidden": mod(func(c *Config) { c.Hidden = -64 }),
		"heads !| hidden": mod(func(c *Config) { c.Heads = 3 }),
		"kv !| heads":     mod(func(c *Config) { c.KVHeads = 3 }),
		"odd head dim":    mod(func(c *Config) { c.Hidden = 36; c.Heads = 4 }),
		"vocab too small": mod(func(c *Config) { c.Vocab = 259 }),
		"dtype":           mod(func(c *Config) { c.DType = "q4" }),
		"zero ctx":        mod(func(c *Config) { c.Ctx = 0 }),
		"zero kv heads":   mod(func(c *Config) { c.KVHeads = 0 }),
		"negative std":    mod(func(c *Config) { c.InitStd = -1 }),
		"nan rope":        mod(func(c *Config) { c.RopeBase = float32(math.NaN()) }),
		"huge vocab":      mod(func(c *Config) { c.Vocab = 1 << 30 }),
		"huge tensor":     mod(func(c *Config) { c.Vocab = 1 << 20; c.Hidden = 1 << 20; c.Heads = 1 << 10; c.KVHeads = 1 << 10 }),
	}
	dir := t.TempDir()
	for name, c := range bad {
		p := filepath.Join(dir, "x.gguf")
		err := Write(p, c)
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
		if _, serr := os.Stat(p); serr == nil {
			t.Errorf("%s: a file was written", name)
		}
	}
	ok := mod(func(c *Config) { c.Vocab = 260; c.Heads = 2; c.KVHeads = 1; c.Layers = 1 })
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestTokenizer(t *testing.T) {
	a, err := TrainTokenizer(BuiltinCorpus(), 512)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := TrainTokenizer(BuiltinCorpus(), 512)
	if !reflect.DeepEqual(a.Tokens, b.Tokens) || !reflect.DeepEqual(a.Merges, b.Merges) {
		t.Fatal("training is not deterministic")
	}
	if len(a.Tokens) != 512 || len(a.Types) != 512 {
		t.Fatalf("%d tokens", len(a.Tokens))
	}
	if a.Learned != 512-256-3 {
		t.Fatalf("learned %d tokens; the built-in corpus should fill a 512 vocab", a.Learned)
	}
	seen := map[string]bool{}
	for i, s := range a.Tokens {
		if seen[s] {
			t.Fatalf("duplicate token %q", s)
		}
		seen[s] = true
		if i < 256 && s != ByteSymbol(byte(i)) {
			t.Fatalf("token %d = %q is not byte %d", i, s, i)
		}
	}
	for b := 0; b < 256; b++ {
		if strings.ContainsAny(ByteSymbol(byte(b)), " \n\t") {
			t.Fatalf("byte %d maps to whitespace", b)
		}
	}
	// every merge joins two existing tokens into an existing token
	for _, m := range a.Merges {
		l, r, ok := strings.Cut(m, " ")
		if !ok || !seen[l] || !seen[r] || !seen[l+r] {
			t.Fatalf("bad merge %q", m)
		}
	}
	for _, s := range Specials {
		id, ok := a.ID(s)
		if !ok || a.Types[id] != gguf.TokenTypeControl {
			t.Fatalf("special %s missing or not control", s)
		}
	}
	// every byte string round-trips, and common words are single tokens
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	texts := []string{"> go to kitchen\nopen door, pick up the key 42!", " the", "héllo 東京 😀\r\n\t  x", "you"}
	for _, s := range texts {
		ids := a.Encode(s)
		if got := a.Decode(ids); got != s {
			t.Fatalf("round trip %q -> %v -> %q", s, ids, got)
		}
	}
	for b := 0; b < 256; b++ { // every byte has its own token, and decodes to itself
		id, ok := a.ID(ByteSymbol(byte(b)))
		if !ok || id != int32(b) || a.Decode([]int32{id}) != string([]byte{byte(b)}) {
			t.Fatalf("byte %d: token %d %v", b, id, ok)
		}
	}
	ids := a.Encode(string(all[:128]))
	if got := a.Decode(ids); got != string(all[:128]) {
		t.Fatal("ASCII bytes do not round-trip")
	}
	if n := len(a.Encode(" the")); n != 1 {
		t.Fatalf("' the' is %d tokens", n)
	}
	if n, m := len(a.Encode("open the door")), len("open the door"); n >= m/2 {
		t.Fatalf("merges barely compress: %d tokens for %d bytes", n, m)
	}
	// a tiny corpus runs out of merges: the vocab is padded, still exact
	c, err := TrainTokenizer("ab ab ab", 300)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tokens) != 300 || c.Learned == 0 || c.Learned > 3 || c.Types[299] != gguf.TokenTypeUnused {
		t.Fatalf("tiny corpus: %d tokens, %d learned", len(c.Tokens), c.Learned)
	}
	if _, err := TrainTokenizer("x", 100); !errors.Is(err, ErrConfig) {
		t.Fatal("vocab 100 accepted")
	}
}

func TestPreTokenize(t *testing.T) {
	cases := map[string][]string{
		"Hello world": {"Hello", " world"},
		"it's DON'T":  {"it", "'s", " DON", "'T"},
		"abc 1234":    {"abc", " ", "1", "2", "3", "4"},
		"x  y":        {"x", " ", " y"},
		"a\n\nb":      {"a", "\n\n", "b"},
		"end.  ":      {"end", ".", "  "},
		"> look":      {">", " look"},
		"$24.99!":     {"$", "2", "4", ".", "9", "9", "!"},
		"(hi)\r\n":    {"(hi", ")\r\n"},
		"  \n  x":     {"  \n", " ", " x"},
		"":            nil,
	}
	for in, want := range cases {
		if got := PreTokenize(in); !reflect.DeepEqual(got, want) {
			t.Errorf("PreTokenize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCustomCorpus(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Vocab = 300
	cfg.Corpus = strings.Repeat("north south east west ", 50)
	tok, err := cfg.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tok.Encode(" north")); n != 1 {
		t.Fatalf("' north' is %d tokens after training on it", n)
	}
	f, err := gguf.Open(write(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	if !reflect.DeepEqual(toks, tok.Tokens) {
		t.Fatal("file tokens differ from Config.Tokenizer")
	}
}

func BenchmarkWrite100M(b *testing.B) {
	cfg := Config{Layers: 12, Hidden: 768, Heads: 12, KVHeads: 2, FFN: 2048, Vocab: 8192, Ctx: 2048, Seed: 1}
	b.Logf("%d parameters", cfg.ParamCount())
	for i := 0; i < b.N; i++ {
		if err := Write(filepath.Join(b.TempDir(), "big.gguf"), cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUTF8LikeLlama pins the llama.cpp decoding rules Encode copies for
// invalid UTF-8 (checked against llama_tokenize during development).
func TestUTF8LikeLlama(t *testing.T) {
	cases := map[string][]rune{
		"a\xc0\xbc":     {'a', '<'},                    // overlong form decoded, not rejected
		"\xff\xfe":      {0xfffd, 0xfffd},              // one U+FFFD per bad byte
		"\xed\xb8\xa5":  {0xde25},                      // surrogates pass through
		"\xe6\x97":      {0xfffd, 0xfffd},              // truncated sequence
		"東京":            {'東', '京'},                    // valid text as usual
		"\x80x":         {0xfffd, 'x'},                 // stray continuation byte
		"\xf7\xbf\xbfA": {0xfffd, 0xfffd, 0xfffd, 'A'}, // 4-byte lead without 3 continuations
	}
	for in, want := range cases {
		if got := decodeUTF8(in); !reflect.DeepEqual(got, want) {
			t.Errorf("decodeUTF8(%q) = %U, want %U", in, got, want)
		}
	}
	if got := encodeUTF8([]rune{0xde25, 'a', 0x110000}); got != "\xed\xb8\xa5a\xef\xbf\xbd" {
		t.Errorf("encodeUTF8 = %q", got)
	}
	tok, _ := TrainTokenizer(BuiltinCorpus(), 300)
	if got := tok.Decode(tok.Encode("x\xc0\xbcy")); got != "x<y" {
		t.Errorf("overlong '<' round trip: %q", got)
	}
}

func TestBERT(t *testing.T) {
	cfg := DefaultBERTConfig()
	p := filepath.Join(t.TempDir(), "b.gguf")
	if err := WriteBERT(p, cfg); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(p)
	cfg2 := cfg
	cfg2.DType = "f16"
	if err := WriteBERT(p, cfg2); err != nil {
		t.Fatal(err)
	}
	if err := WriteBERT(p, cfg); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !bytes.Equal(a, b) {
		t.Fatal("same BERT config, different files")
	}
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s, _ := f.String("general.architecture"); s != "bert" {
		t.Fatalf("arch %q", s)
	}
	if s, _ := f.String("tokenizer.ggml.model"); s != "bert" {
		t.Fatalf("tokenizer %q", s)
	}
	if c, ok := f.Bool("bert.attention.causal"); !ok || c {
		t.Fatal("bert.attention.causal must be false")
	}
	if pt, _ := f.Uint32("bert.pooling_type"); pt != 1 {
		t.Fatalf("pooling %d, want 1 (mean)", pt)
	}
	var params uint64
	for _, ti := range f.Tensors {
		params += ti.NumElements()
	}
	if int64(params) != cfg.ParamCount() {
		t.Fatalf("tensors hold %d parameters, ParamCount %d", params, cfg.ParamCount())
	}
	if ti, ok := f.Tensor("position_embd.weight"); !ok || ti.Shape[1] != uint64(cfg.Ctx) {
		t.Fatalf("position_embd %+v", ti)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	if len(toks) != cfg.Vocab || !reflect.DeepEqual(toks[:5], BERTSpecials) {
		t.Fatalf("%d tokens, first %v", len(toks), toks[:min(5, len(toks))])
	}
	seen := map[string]bool{}
	words, pieces := 0, 0
	for _, tk := range toks {
		if seen[tk] {
			t.Fatalf("duplicate token %q", tk)
		}
		seen[tk] = true
		if strings.HasPrefix(tk, "\u2581") {
			words++
		} else if !strings.HasPrefix(tk, "[") {
			pieces++
		}
	}
	if words < 100 || pieces < 100 {
		t.Fatalf("%d word-initial and %d continuation pieces", words, pieces)
	}
	wp, err := cfg.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(wp.GGUF, toks) {
		t.Fatal("Tokenizer() differs from the file's vocabulary")
	}
	for i, hf := range wp.HF {
		if want := wordPieceToGGUF(hf); want != toks[i] || (strings.HasPrefix(hf, "##") && toks[i] != hf[2:]) {
			t.Fatalf("token %d: vocab.txt %q, gguf %q", i, hf, toks[i])
		}
	}
	// a known word is one piece, an unknown one is split into characters,
	// unknown characters give [UNK]
	if got := wp.Encode("the"); len(got) != 3 || toks[got[1]] != "\u2581the" {
		t.Fatalf("Encode(the) = %v", got)
	}
	if got := wp.Encode("qzqx"); len(got) < 4 || toks[got[1]] != "\u2581q" {
		t.Fatalf("Encode(qzqx) = %v", got)
	}
	if got := wp.Encode("\u2603"); len(got) != 3 || got[1] != 1 {
		t.Fatalf("Encode(snowman) = %v, want [CLS] [UNK] [SEP]", got)
	}
	for _, bad := range []BERTConfig{{Layers: 1, Hidden: 30, Heads: 4, FFN: 8, Vocab: 100, Ctx: 8}, {Layers: 1, Hidden: 32, Heads: 4, FFN: 8, Vocab: 3, Ctx: 8}, {Layers: 1, Hidden: 32, Heads: 4, FFN: 8, Vocab: 100, Ctx: 0}, {Layers: 1, Hidden: 32, Heads: 4, FFN: 8, Vocab: 100, Ctx: 8, DType: "q8"}} {
		if err := WriteBERT(filepath.Join(t.TempDir(), "x.gguf"), bad); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}

// TestLayersLimitAndFileBytes: more layers than llama.cpp loads (512) are
// refused, and FileBytes predicts the written size within 2%.
func TestLayersLimitAndFileBytes(t *testing.T) {
	c := DefaultConfig()
	c.Layers = MaxLayers + 1
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("layers %d: got %v, want ErrConfig", c.Layers, err)
	}
	c.Layers = MaxLayers
	if err := c.Validate(); err != nil {
		t.Fatalf("layers %d: %v", c.Layers, err)
	}
	for _, dt := range []string{"f32", "f16"} {
		c := DefaultConfig()
		c.DType = dt
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := Write(path, c); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		est := c.FileBytes()
		if d := float64(est-fi.Size()) / float64(fi.Size()); d < -0.02 || d > 0.02 {
			t.Errorf("%s: FileBytes %d, file %d bytes (%.1f%%)", dt, est, fi.Size(), 100*d)
		}
	}
}
