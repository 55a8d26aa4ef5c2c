package modelgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/qwentok"
)

var (
	qwenOnce sync.Once
	qwenTok  *HFTokenizer
	qwenErr  error
)

// qwen loads the real Qwen tokenizer once per test binary.
func qwen(t *testing.T) (*HFTokenizer, string) {
	t.Helper()
	dir := qwentok.Dir(t)
	qwenOnce.Do(func() { qwenTok, qwenErr = LoadHFTokenizer(dir) })
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok, dir
}

// qwenJSON is the test's own reading of Qwen's tokenizer files.
type qwenJSON struct {
	Vocab  map[string]int
	Merges [][]string
	Added  []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	Config map[string]any
	raw    map[string][]byte
}

func readQwenJSON(t *testing.T, dir string) *qwenJSON {
	t.Helper()
	q := &qwenJSON{raw: map[string][]byte{}}
	for _, n := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		q.raw[n] = b
	}
	var tj struct {
		AddedTokens json.RawMessage `json:"added_tokens"`
		Model       struct {
			Vocab  map[string]int `json:"vocab"`
			Merges [][]string     `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(q.raw["tokenizer.json"], &tj); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(tj.AddedTokens, &q.Added); err != nil {
		t.Fatal(err)
	}
	q.Vocab, q.Merges = tj.Model.Vocab, tj.Model.Merges
	if err := json.Unmarshal(q.raw["tokenizer_config.json"], &q.Config); err != nil {
		t.Fatal(err)
	}
	return q
}

func (q *qwenJSON) addedID(t *testing.T, content string) int {
	for _, a := range q.Added {
		if a.Content == content {
			return a.ID
		}
	}
	t.Fatalf("no added token %q", content)
	return 0
}

// TestHFTokenizerQwen checks the converted real Qwen tokenizer against the
// files themselves: every vocab entry under its id and NORMAL; the added
// tokens 151643–151668 as the converter types them (CONTROL for special
// tokens and for the special-looking <|fim_prefix|>…<|file_sep|>, which the
// files mark special: false; USER_DEFINED for <tool_call>, <think>, …);
// merges in order; then the GGUF written for Qwen2.5-7B's vocabulary size:
// 395 [PADn] UNUSED tokens up to 152064, eos/pad ids found by content, no
// BOS key (the files name none; config.json would), add_bos false, the chat
// template byte for byte, the original files stored unchanged.
func TestHFTokenizerQwen(t *testing.T) {
	tok, dir := qwen(t)
	q := readQwenJSON(t, dir)
	if tok.Pre != "qwen2" || len(tok.Tokens) != 151669 || len(q.Vocab) != 151643 || len(q.Added) != 26 {
		t.Fatalf("pre %s, %d tokens; files: %d vocab, %d added", tok.Pre, len(tok.Tokens), len(q.Vocab), len(q.Added))
	}
	for s, id := range q.Vocab {
		if tok.Tokens[id] != s || tok.Types[id] != gguf.TokenTypeNormal {
			t.Fatalf("id %d: %q type %d, file %q", id, tok.Tokens[id], tok.Types[id], s)
		}
	}
	want := map[int]int32{}
	for id := 151643; id <= 151656; id++ {
		want[id] = gguf.TokenTypeControl
	}
	for id := 151659; id <= 151664; id++ {
		want[id] = gguf.TokenTypeControl // <|fim_prefix|> … <|file_sep|>: special false, but <|…|>
	}
	for _, id := range []int{151657, 151658, 151665, 151666, 151667, 151668} {
		want[id] = gguf.TokenTypeUserDefined
	}
	for _, a := range q.Added {
		if tok.Tokens[a.ID] != a.Content || tok.Types[a.ID] != want[a.ID] {
			t.Errorf("added %d %q (special %v): %q type %d, want type %d", a.ID, a.Content, a.Special, tok.Tokens[a.ID], tok.Types[a.ID], want[a.ID])
		}
		if a.Special != (a.ID <= 151656) { // only the first 14 are special in the files
			t.Errorf("%q: the files mark it special %v", a.Content, a.Special)
		}
	}
	if tok.Tokens[151667] != "<think>" || tok.Tokens[151645] != "<|im_end|>" {
		t.Fatal("think/im_end ids")
	}
	if len(tok.Merges) != len(q.Merges) || len(tok.Merges) != 151387 {
		t.Fatalf("%d merges, files %d", len(tok.Merges), len(q.Merges))
	}
	for i, m := range q.Merges {
		if tok.Merges[i] != m[0]+" "+m[1] {
			t.Fatalf("merge %d: %q, file %v", i, tok.Merges[i], m)
		}
	}

	cfg := DefaultConfig()
	cfg.Vocab, cfg.TiedEmbeddings, cfg.HFTokenizer = 152064, true, tok
	f := openWritten(t, cfg)
	if est, got := cfg.FileBytes(), f.Size; est < got*98/100 || est > got*102/100 {
		t.Errorf("FileBytes %d, file %d", est, got)
	}
	str := func(k string) string { v, _ := f.String(k); return v }
	if str("tokenizer.ggml.model") != "gpt2" || str("tokenizer.ggml.pre") != "qwen2" {
		t.Fatal("model/pre")
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	tt, _ := f.Get("tokenizer.ggml.token_type")
	types := tt.([]int32)
	if len(toks) != 152064 || len(types) != 152064 {
		t.Fatalf("%d tokens", len(toks))
	}
	for id := 151669; id < 152064; id++ {
		if toks[id] != "[PAD"+itoa(id)+"]" || types[id] != gguf.TokenTypeUnused {
			t.Fatalf("id %d: %q type %d", id, toks[id], types[id])
		}
	}
	u32 := func(k string) (uint32, bool) { return f.Uint32(k) }
	if id, ok := u32("tokenizer.ggml.eos_token_id"); !ok || int(id) != q.addedID(t, q.Config["eos_token"].(string)) || id != 151645 {
		t.Errorf("eos %d %v", id, ok)
	}
	if id, ok := u32("tokenizer.ggml.padding_token_id"); !ok || int(id) != q.addedID(t, q.Config["pad_token"].(string)) || id != 151643 {
		t.Errorf("pad %d %v", id, ok)
	}
	for _, k := range []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.unknown_token_id"} {
		if _, ok := f.Get(k); ok {
			t.Errorf("%s written; the files do not set it", k)
		}
	}
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || b || q.Config["add_bos_token"] != false {
		t.Errorf("add_bos %v %v", b, ok)
	}
	if str("tokenizer.chat_template") != q.Config["chat_template"].(string) || !strings.Contains(str("tokenizer.chat_template"), "enable_thinking") {
		t.Error("chat template differs from tokenizer_config.json's")
	}
	if str(HFTokenizerJSONKey) != string(q.raw["tokenizer.json"]) || str(HFFileKeyPrefix+"tokenizer_config.json") != string(q.raw["tokenizer_config.json"]) {
		t.Error("stored files differ from the originals")
	}
	stored, err := StoredHFTokenizer(f)
	if err != nil || stored == nil {
		t.Fatal(stored, err)
	}
	if err := stored.Matches(f); err != nil {
		t.Error(err)
	}

	// A family preset names BOS as its config.json does; tokenizer_config.json's eos wins.
	p, _ := LookupPreset("qwen2.5-7b")
	c2 := *tok
	c2.ConfigTokenIDs = p.TokenIDs
	g := vocabOnly(t, &c2, 152064)
	bos, _ := g.Uint32("tokenizer.ggml.bos_token_id")
	eos, _ := g.Uint32("tokenizer.ggml.eos_token_id")
	var order []string
	for _, k := range g.Keys() {
		if strings.HasSuffix(k, "_token_id") {
			order = append(order, k)
		}
	}
	if bos != 151643 || eos != 151645 || strings.Join(order, " ") != "tokenizer.ggml.eos_token_id tokenizer.ggml.padding_token_id tokenizer.ggml.bos_token_id" {
		t.Errorf("bos %d eos %d, key order %v", bos, eos, order)
	}

	// A vocabulary that differs by one token type is not the tokenizer's.
	c3 := *tok
	c3.Types = append([]int32(nil), tok.Types...)
	c3.Types[151667] = gguf.TokenTypeControl
	if err := c3.Matches(f); !errors.Is(err, ErrHFTokenizer) || !strings.Contains(err.Error(), "151667") {
		t.Errorf("changed type: %v", err)
	}
}

// openWritten writes cfg's model and opens it (closed at the end of t).
func openWritten(t *testing.T, cfg Config) *gguf.File {
	t.Helper()
	f, err := gguf.Open(write(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// vocabOnly is the GGUF of h's vocabulary alone (n tokens), read back.
func vocabOnly(t *testing.T, h *HFTokenizer, n int) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	if err := h.AddTo(w, n); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.OpenReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// synthetic builds tokenizer files from the built-in trained vocabulary:
// ids 0..508 the BPE vocabulary, then the three ChatML specials and extra
// added tokens.
type synthetic struct {
	tj    map[string]any
	tc    map[string]any
	files map[string][]byte
}

func newSynthetic(t *testing.T, regex string) *synthetic {
	t.Helper()
	tr, err := TrainTokenizer(builtinCorpus, 512)
	if err != nil {
		t.Fatal(err)
	}
	vocab := map[string]int{}
	for id, s := range tr.Tokens[:509] {
		vocab[s] = id
	}
	merges := make([][]string, len(tr.Merges))
	for i, m := range tr.Merges {
		a, b, _ := strings.Cut(m, " ")
		merges[i] = []string{a, b}
	}
	added := []any{}
	for i, s := range Specials {
		added = append(added, map[string]any{"id": 509 + i, "content": s, "special": true, "normalized": false})
	}
	split := map[string]any{"type": "Split", "pattern": map[string]any{"Regex": regex}, "behavior": "Isolated", "invert": false}
	bl := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	return &synthetic{
		tj: map[string]any{
			"added_tokens": added, "normalizer": nil,
			"pre_tokenizer":  map[string]any{"type": "Sequence", "pretokenizers": []any{split, bl}},
			"post_processor": bl, "decoder": bl,
			"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": false, "ignore_merges": regex == regexLlama3},
		},
		tc:    map[string]any{"eos_token": TokImEnd, "pad_token": TokEndOfText, "bos_token": nil, "add_bos_token": false, "chat_template": "T"},
		files: map[string][]byte{},
	}
}

func (s *synthetic) addToken(id int, content string, special bool) {
	s.tj["added_tokens"] = append(s.tj["added_tokens"].([]any), map[string]any{"id": id, "content": content, "special": special})
}

func (s *synthetic) parse(t *testing.T) (*HFTokenizer, error) {
	t.Helper()
	files := map[string][]byte{}
	for k, v := range s.files {
		files[k] = v
	}
	b, err := json.Marshal(s.tj)
	if err != nil {
		t.Fatal(err)
	}
	files["tokenizer.json"] = b
	if s.tc != nil {
		if files["tokenizer_config.json"], err = json.Marshal(s.tc); err != nil {
			t.Fatal(err)
		}
	}
	return ParseHFTokenizer(files)
}

func (s *synthetic) must(t *testing.T) *HFTokenizer {
	t.Helper()
	h, err := s.parse(t)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHFTokenizerSynthetic: files made from the trained built-in vocabulary
// convert back to the same tokens, types and merges, and the converter's
// rules for user-defined tokens, padding and config.json hold.
func TestHFTokenizerSynthetic(t *testing.T) {
	tr, _ := TrainTokenizer(builtinCorpus, 512)
	s := newSynthetic(t, regexQwen2)
	s.addToken(514, "<tool▁call>", false)
	s.addToken(515, "<|fim_prefix|>", false)
	s.files["config.json"] = []byte(`{"vocab_size": 520, "bos_token_id": 509, "eos_token_id": [511, 509], "pad_token_id": 3}`)
	h := s.must(t)
	if h.Pre != "qwen2" || len(h.Tokens) != 516 || strings.Join(h.Merges, "\n") != strings.Join(tr.Merges, "\n") {
		t.Fatalf("pre %s, %d tokens", h.Pre, len(h.Tokens))
	}
	for id := 0; id < 512; id++ {
		if h.Tokens[id] != tr.Tokens[id] || h.Types[id] != tr.Types[id] {
			t.Fatalf("id %d: %q %d, trained %q %d", id, h.Tokens[id], h.Types[id], tr.Tokens[id], tr.Types[id])
		}
	}
	for id, w := range map[int]struct {
		s string
		t int32
	}{512: {"[PAD512]", gguf.TokenTypeUnused}, 513: {"[PAD513]", gguf.TokenTypeUnused}, 514: {"<tool call>", gguf.TokenTypeUserDefined}, 515: {"<|fim_prefix|>", gguf.TokenTypeControl}} {
		if h.Tokens[id] != w.s || h.Types[id] != w.t {
			t.Errorf("id %d: %q %d, want %q %d", id, h.Tokens[id], h.Types[id], w.s, w.t)
		}
	}
	if h.DefaultVocab() != 520 {
		t.Errorf("default vocab %d (config.json says 520)", h.DefaultVocab())
	}
	got := h.SpecialIDs()
	wantIDs := []SpecialID{{"eos", 511}, {"pad", 509}, {"bos", 509}} // config.json's list-valued eos is not an id; its pad does not override
	if len(got) != len(wantIDs) {
		t.Fatalf("special ids %v", got)
	}
	for i := range got {
		if got[i] != wantIDs[i] {
			t.Fatalf("special ids %v, want %v", got, wantIDs)
		}
	}
	toks, types, err := h.Vocab(520)
	if err != nil || toks[519] != "[PAD519]" || types[519] != gguf.TokenTypeUnused {
		t.Fatalf("vocab: %v", err)
	}
	if _, _, err := h.Vocab(515); !errors.Is(err, ErrConfig) {
		t.Errorf("vocab smaller than the tokenizer: %v", err)
	}

	// A model with it: validation, and the file matches.
	cfg := DefaultConfig()
	cfg.Vocab, cfg.HFTokenizer = 0, h
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Corpus = "some text"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("corpus and tokenizer: %v", err)
	}
	cfg.Corpus, cfg.Vocab = "", 515
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("vocab 515: %v", err)
	}
	cfg.Vocab = 0
	f := openWritten(t, cfg)
	if n, _ := f.ArrayLen("tokenizer.ggml.tokens"); n != 520 {
		t.Errorf("%d tokens", n)
	}
	if err := h.Matches(f); err != nil {
		t.Error(err)
	}
	if _, err := cfg.Tokenizer(); !errors.Is(err, ErrConfig) {
		t.Errorf("Tokenizer of a Hugging Face vocabulary: %v", err)
	}
	// the trained model's vocabulary is not this tokenizer's (512 tokens, no added ones)
	if err := h.Matches(openWritten(t, DefaultConfig())); !errors.Is(err, ErrHFTokenizer) {
		t.Errorf("trained model: %v", err)
	}
}

// TestHFTokenizerPostProcessor: gguf-py SpecialVocab's reading of
// TemplateProcessing (Llama 3: BOS first, so add_bos; a trailing token other
// than eos_token becomes EOS and the old EOS EOT), RobertaProcessing, and
// its quirk that a bos_token given as {"content": …} never equals the
// template's token.
func TestHFTokenizerPostProcessor(t *testing.T) {
	tmpl := func(single ...string) map[string]any {
		part := func(s string) any {
			if s == "A" || s == "B" {
				return map[string]any{"Sequence": map[string]any{"id": s, "type_id": 0}}
			}
			return map[string]any{"SpecialToken": map[string]any{"id": s, "type_id": 0}}
		}
		var sp, pp []any
		for _, s := range single {
			sp = append(sp, part(s))
		}
		for _, s := range append(append([]string(nil), single...), single...) {
			if s == "A" {
				s = "B"
			}
			pp = append(pp, part(s))
		}
		// pair: the single template twice, with A then B
		pp = append(append([]any(nil), sp...), pp[len(sp):]...)
		return map[string]any{"type": "TemplateProcessing", "single": sp, "pair": pp}
	}
	bl := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}

	// Llama 3: <|begin_of_text|> $A, the llama3 regex, ignore_merges
	s := newSynthetic(t, regexLlama3)
	s.addToken(512, "<|begin_of_text|>", true)
	s.tj["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{bl, tmpl("<|begin_of_text|>", "A")}}
	s.tc = map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": TokEndOfText, "chat_template": "T"}
	h := s.must(t)
	if h.Pre != "llama-bpe" || len(h.SpecialIDs()) != 2 || h.SpecialIDs()[0] != (SpecialID{"bos", 512}) {
		t.Fatalf("pre %s, ids %v", h.Pre, h.SpecialIDs())
	}
	if a := h.AddSpecialFlags(); len(a) != 2 || a[0] != (AddSpecial{"bos", true}) || a[1] != (AddSpecial{"sep", false}) {
		t.Errorf("add flags %v", a)
	}

	// single [BOS, A, <|end|>] with eos_token <|im_end|>: EOS <|end|>, EOT <|im_end|>
	s = newSynthetic(t, regexQwen2)
	s.addToken(512, "<|begin|>", true)
	s.addToken(513, "<|end|>", true)
	s.tj["post_processor"] = tmpl("<|begin|>", "A", "<|end|>")
	s.tc = map[string]any{"bos_token": "<|begin|>", "eos_token": TokImEnd}
	h = s.must(t)
	ids := map[string]int{}
	for _, x := range h.SpecialIDs() {
		ids[x.Kind] = x.ID
	}
	if ids["bos"] != 512 || ids["eos"] != 513 || ids["eot"] != 511 || len(ids) != 3 {
		t.Errorf("ids %v", h.SpecialIDs())
	}
	if a := h.AddSpecialFlags(); len(a) != 3 || a[0] != (AddSpecial{"bos", true}) || a[1] != (AddSpecial{"eos", true}) || a[2] != (AddSpecial{"sep", false}) {
		t.Errorf("add flags %v", a)
	}

	// the dict form of bos_token: named, but add_bos false
	s.tj["post_processor"] = tmpl("<|begin|>", "A")
	s.tc = map[string]any{"bos_token": map[string]any{"content": "<|begin|>"}, "eos_token": TokImEnd}
	h = s.must(t)
	if a := h.AddSpecialFlags(); len(a) != 2 || a[0] != (AddSpecial{"bos", false}) || h.SpecialIDs()[0] != (SpecialID{"bos", 512}) {
		t.Errorf("dict bos: add %v ids %v", a, h.SpecialIDs())
	}

	// RobertaProcessing: add bos, eos and sep
	s.tj["post_processor"] = map[string]any{"type": "RobertaProcessing", "cls": []any{"<|begin|>", 512}, "sep": []any{"<|end|>", 513}}
	s.tc = map[string]any{"bos_token": "<|begin|>", "eos_token": "<|end|>"}
	h = s.must(t)
	if a := h.AddSpecialFlags(); len(a) != 3 {
		t.Errorf("roberta add flags %v", a)
	}
	ids = map[string]int{}
	for _, x := range h.SpecialIDs() {
		ids[x.Kind] = x.ID
	}
	if ids["cls"] != 512 || ids["sep"] != 513 {
		t.Errorf("roberta ids %v", h.SpecialIDs())
	}

	// without tokenizer_config.json: no special ids and no template from it
	s.tc = nil
	s.tj["post_processor"] = bl
	if h = s.must(t); len(h.SpecialIDs()) != 0 || h.ChatTemplate != "" || len(h.Files) != 1 {
		t.Errorf("no tokenizer_config: %v %q %d files", h.SpecialIDs(), h.ChatTemplate, len(h.Files))
	}
}

// TestHFTokenizerChatTemplates: the template from tokenizer_config.json, else
// chat_template.jinja (with additional_chat_templates, the named list form
// written as tokenizer.chat_template.NAME) or chat_template.json.
func TestHFTokenizerChatTemplates(t *testing.T) {
	s := newSynthetic(t, regexQwen2)
	delete(s.tc, "chat_template")
	s.files["chat_template.json"] = []byte(`{"chat_template": "from json"}`)
	if h := s.must(t); h.ChatTemplate != "from json" {
		t.Errorf("chat_template.json: %q", h.ChatTemplate)
	}
	s.files["chat_template.jinja"] = []byte("main {{ x }}")
	s.files["additional_chat_templates/tool use.jinja"] = []byte("tools")
	h := s.must(t)
	if h.ChatTemplate != "main {{ x }}" || h.NamedTemplates["tool_use"] != "tools" || len(h.NamedTemplates) != 1 {
		t.Fatalf("templates %q %v", h.ChatTemplate, h.NamedTemplates)
	}
	g := vocabOnly(t, h, 512)
	names, _ := g.Strings("tokenizer.chat_templates")
	named, _ := g.String("tokenizer.chat_template.tool_use")
	main, _ := g.String("tokenizer.chat_template")
	jinja, _ := g.String(HFFileKeyPrefix + "additional_chat_templates/tool use.jinja")
	if len(names) != 1 || names[0] != "tool_use" || named != "tools" || main != "main {{ x }}" || jinja != "tools" {
		t.Errorf("keys: %v %q %q %q", names, named, main, jinja)
	}
	stored, err := StoredHFTokenizer(g)
	if err != nil || stored.NamedTemplates["tool_use"] != "tools" || len(stored.Files) != len(h.Files) {
		t.Errorf("stored: %v", err)
	}
	// tokenizer_config.json's own template wins; null means none
	s.tc["chat_template"] = nil
	if h := s.must(t); h.ChatTemplate != "" || h.NamedTemplates != nil {
		t.Errorf("null template: %q", h.ChatTemplate)
	}
}

// TestHFTokenizerRefused: tokenizers llama.cpp would tokenize differently, or
// files that contradict themselves, are refused with ErrHFTokenizer.
func TestHFTokenizerRefused(t *testing.T) {
	for name, edit := range map[string]func(s *synthetic){
		"unknown regex": func(s *synthetic) {
			s.tj["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+`}
		},
		"byte fallback":       func(s *synthetic) { s.tj["model"].(map[string]any)["byte_fallback"] = true },
		"ignore_merges qwen2": func(s *synthetic) { s.tj["model"].(map[string]any)["ignore_merges"] = true },
		"WordPiece":           func(s *synthetic) { s.tj["model"].(map[string]any)["type"] = "WordPiece" },
		"decoder":             func(s *synthetic) { s.tj["decoder"] = map[string]any{"type": "Metaspace"} },
		"lowercase":           func(s *synthetic) { s.tj["normalizer"] = map[string]any{"type": "Lowercase"} },
		"no pre-tokenizer":    func(s *synthetic) { s.tj["pre_tokenizer"] = nil },
		"raw byte token":      func(s *synthetic) { s.tj["model"].(map[string]any)["vocab"].(map[string]int)["\x01"] = 600 },
		"shared id": func(s *synthetic) {
			s.tj["model"].(map[string]any)["vocab"].(map[string]int)["Ġzzz"] = 5
		},
		"added token on a vocab id": func(s *synthetic) { s.addToken(7, "<x>", true) },
		"duplicate string":          func(s *synthetic) { s.addToken(600, "[PAD520]", true); s.addToken(600, "[PAD520]", true) },
		"added_tokens_decoder disagrees": func(s *synthetic) {
			s.tc["added_tokens_decoder"] = map[string]any{"511": map[string]any{"content": TokImEnd, "special": false}}
		},
		"merges": func(s *synthetic) { s.tj["model"].(map[string]any)["merges"] = []any{[]string{"a"}} },
		"bad json": func(s *synthetic) {
			s.files["config.json"] = []byte("{")
		},
	} {
		s := newSynthetic(t, regexQwen2)
		edit(s)
		if _, err := s.parse(t); !errors.Is(err, ErrHFTokenizer) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// duplicate-string case above: [PAD520] only clashes as padding
	s := newSynthetic(t, regexQwen2)
	s.addToken(512, "[PAD600]", false)
	h := s.must(t)
	if _, _, err := h.Vocab(700); !errors.Is(err, ErrHFTokenizer) {
		t.Errorf("padding onto an existing token: %v", err)
	}
	if _, err := LoadHFTokenizer(t.TempDir()); !errors.Is(err, ErrHFTokenizer) {
		t.Errorf("empty folder: %v", err)
	}
}

// TestHFTokenizerLoadFile: a folder and its tokenizer.json give the same
// tokenizer.
func TestHFTokenizerLoadFile(t *testing.T) {
	s := newSynthetic(t, regexQwen2)
	dir := t.TempDir()
	b, _ := json.Marshal(s.tj)
	c, _ := json.Marshal(s.tc)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), c, 0o644)
	a, err := LoadHFTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := LoadHFTokenizer(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Tokens, "\x00") != strings.Join(f.Tokens, "\x00") || a.ChatTemplate != "T" || f.ChatTemplate != "T" || len(f.Files) != 2 {
		t.Error("folder and file differ")
	}
}
