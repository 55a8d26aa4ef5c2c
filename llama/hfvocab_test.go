package llama

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/qwentok"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
)

var (
	qwenOnce  sync.Once
	qwenModel *Model
	qwenErr   error
)

// loadQwenVocab returns a tiny model (2 layers, hidden 64, tied) carrying
// the real Qwen vocabulary, padded to Qwen2.5-7B's 152,064 tokens; it is
// written and loaded once per test binary (and left open: it is read only).
func loadQwenVocab(t *testing.T) *Model {
	t.Helper()
	dir := qwentok.Dir(t)
	qwenOnce.Do(func() {
		tok, err := modelgen.LoadHFTokenizer(dir)
		if err != nil {
			qwenErr = err
			return
		}
		cfg := modelgen.DefaultConfig()
		cfg.HFTokenizer, cfg.Vocab, cfg.TiedEmbeddings = tok, 152064, true
		path := filepath.Join(testDir, "qwen-vocab.gguf")
		if qwenErr = modelgen.Write(path, cfg); qwenErr == nil {
			qwenModel, qwenErr = LoadModel(path, ModelParams{UseMmap: true})
		}
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenModel
}

// TestQwenVocabFixtures: llama.cpp, with the vocabulary written as
// convert_hf_to_gguf.py writes it, tokenizes every fixture text (added and
// special tokens in the text parsed, as Hugging Face tokenizers do) to the
// ids Qwen's own tokenizer gives it, and the ids detokenize to the text.
func TestQwenVocabFixtures(t *testing.T) {
	fx := qwentok.Fixtures(t)
	m := loadQwenVocab(t)
	if m.NVocab() != 152064 {
		t.Fatalf("n_vocab %d", m.NVocab())
	}
	for i, f := range fx {
		got, err := m.Tokenize(f.Text, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, f.IDs) {
			t.Errorf("fixture %d %.60q:\n got  %v\n want %v", i, f.Text, got, f.IDs)
			continue
		}
		if back, _ := m.Detokenize(got); back != f.Text {
			t.Errorf("fixture %d: detokenized %.60q", i, back)
		}
	}
	t.Logf("%d fixtures", len(fx))
}

// TestQwenVocabPreTokenizerHash: the converter names the pre-tokenizer by
// the sha256 of the check string's token ids (get_vocab_base_pre); with this
// vocabulary llama.cpp's ids hash to the value it maps to "qwen2" (ref
// Qwen/Qwen1.5-7B, the same vocabulary and merges), so the regex-based
// choice of modelgen.LoadHFTokenizer is the converter's.
func TestQwenVocabPreTokenizerHash(t *testing.T) {
	m := loadQwenVocab(t)
	const chktxt = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"
	ids, err := m.Tokenize(chktxt, true, true)
	if err != nil {
		t.Fatal(err)
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	sum := sha256.Sum256([]byte("[" + strings.Join(s, ", ") + "]")) // Python's str(list)
	if h := hex.EncodeToString(sum[:]); h != "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea" {
		t.Errorf("check hash %s (%d ids)", h, len(ids))
	}
}

// TestQwenVocabSpecials: llama.cpp reads the special tokens as Qwen's
// GGUFs have them: EOS <|im_end|> (also the end of generation), no BOS
// added; control tokens are matched only with special parsing, user-defined
// ones (<think>) always, padding never produced.
func TestQwenVocabSpecials(t *testing.T) {
	m := loadQwenVocab(t)
	sp := m.Special()
	if sp.EOS != 151645 || sp.ImStart != 151644 || sp.ImEnd != 151645 || sp.AddBOS || !m.IsEOG(151645) || !m.IsEOG(151643) {
		t.Errorf("specials %+v, eog(im_end) %v", sp, m.IsEOG(151645))
	}
	if got := mustTokenize(t, m, "<|im_start|>user"); !slices.Equal(got, []int32{151644, 872}) {
		t.Errorf("parsed: %v", got)
	}
	plain, err := m.Tokenize("<|im_start|><think>", false, false)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(plain, 151644) || !slices.Contains(plain, 151667) {
		t.Errorf("no special parsing: %v (want <|im_start|> as text, <think> still 151667)", plain)
	}
	// padding: no text of its own, and its name is ordinary text
	if p, _ := m.TokenPiece(152063); p != "" || slices.Contains(mustTokenize(t, m, "[PAD152063]"), 152063) {
		t.Errorf("last padding token %q", p)
	}
}

// TestLoadVocab: the vocabulary alone (no weights) tokenizes and renders
// exactly as the model does; bad tokens and use after Close are errors.
func TestLoadVocab(t *testing.T) {
	m := loadQwenVocab(t)
	v, err := LoadVocab(m.Path())
	if err != nil {
		t.Fatal(err)
	}
	if v.NVocab() != m.NVocab() {
		t.Fatalf("n_vocab %d, model %d", v.NVocab(), m.NVocab())
	}
	for _, f := range qwentok.Fixtures(t)[:20] {
		a, _ := m.Tokenize(f.Text, true, true)
		b, err := v.Tokenize(f.Text, true, true)
		if err != nil || !slices.Equal(a, b) {
			t.Fatalf("%.40q: vocab %v, model %v (%v)", f.Text, b, a, err)
		}
	}
	for _, id := range []int32{0, 198, 151644, 151667, 152063} {
		a, _ := m.TokenPiece(id)
		if b, err := v.TokenPiece(id); err != nil || a != b {
			t.Errorf("piece %d: %q, model %q", id, b, a)
		}
	}
	if _, err := v.TokenPiece(152064); !errors.Is(err, ErrBadToken) {
		t.Errorf("token past the vocabulary: %v", err)
	}
	v.Close()
	v.Close()
	if _, err := v.Tokenize("x", false, false); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if _, err := LoadVocab(filepath.Join(t.TempDir(), "missing.gguf")); !errors.Is(err, ErrModelLoad) {
		t.Errorf("missing file: %v", err)
	}
}

// TestLlama3StyleVocab: a Llama-3-style tokenizer folder (the llama3 split
// regex, ignore_merges, a TemplateProcessing that puts <|begin_of_text|>
// first), made from the trained tiny model's exported tokenizer, converts to
// a "llama-bpe" vocabulary that llama.cpp loads, adds BOS to as the template
// says, and tokenizes digit-free text as the trained tokenizer does (the two
// pre-tokenizers differ only on runs of digits).
func TestLlama3StyleVocab(t *testing.T) {
	tr, err := modelgen.DefaultConfig().Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	base, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	dir := filepath.Join(t.TempDir(), "hf")
	if err := lora.ExportHF(base, nil, dir, lora.HFOptions{}); err != nil {
		t.Fatal(err)
	}
	var tj, tc map[string]any
	for name, v := range map[string]*map[string]any{"tokenizer.json": &tj, "tokenizer_config.json": &tc} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || json.Unmarshal(b, v) != nil {
			t.Fatal(name, err)
		}
	}
	regex, _ := modelgen.PreTokenizerRegex("llama-bpe")
	tj["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": regex}
	tj["model"].(map[string]any)["ignore_merges"] = true
	special := func(s string) any { return map[string]any{"SpecialToken": map[string]any{"id": s, "type_id": 0}} }
	seq := func(s string) any { return map[string]any{"Sequence": map[string]any{"id": s, "type_id": 0}} }
	bos, eos := modelgen.TokEndOfText, modelgen.TokImEnd
	tj["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{tj["post_processor"], map[string]any{"type": "TemplateProcessing",
		"single": []any{special(bos), seq("A")}, "pair": []any{special(bos), seq("A"), special(bos), seq("B")}}}}
	tc["bos_token"], tc["eos_token"] = bos, eos
	delete(tc, "add_bos_token") // as Llama 3's: an explicit false would override the template
	files := map[string][]byte{}
	files["tokenizer.json"], _ = json.Marshal(tj)
	files["tokenizer_config.json"], _ = json.Marshal(tc)
	h, err := modelgen.ParseHFTokenizer(files)
	if err != nil {
		t.Fatal(err)
	}
	if h.Pre != "llama-bpe" {
		t.Fatalf("pre %q", h.Pre)
	}
	cfg := modelgen.DefaultConfig()
	cfg.HFTokenizer = h
	path := filepath.Join(t.TempDir(), "llama3.gguf")
	if err := modelgen.Write(path, cfg); err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(path, ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	bosID, _ := tr.ID(bos)
	eosID, _ := tr.ID(eos)
	if sp := m.Special(); sp.BOS != bosID || sp.EOS != eosID || !sp.AddBOS || !m.IsEOG(eosID) {
		t.Fatalf("specials %+v", sp)
	}
	n := 0
	for _, line := range strings.Split(modelgen.BuiltinCorpus(), "\n") {
		if strings.ContainsAny(line, "0123456789") || line == "" {
			continue
		}
		got, err := m.Tokenize(line, true, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]int32{bosID}, tr.Encode(line)...); !slices.Equal(got, want) {
			t.Errorf("%.50q:\n got  %v\n want %v", line, got, want)
		}
		n++
	}
	t.Logf("%d lines", n)
}
