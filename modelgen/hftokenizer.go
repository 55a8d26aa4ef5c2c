package modelgen

// A Hugging Face byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json)
// as a GGUF vocabulary, written the way llama.cpp's convert_hf_to_gguf.py
// writes it for Qwen2/2.5/3 and Llama-3 models: TextModel._set_vocab_gpt2,
// which is get_vocab_base (tokens and token types), get_vocab_base_pre (the
// pre-tokenizer name) and gguf-py's SpecialVocab (merges, special token ids,
// add_bos/add_eos/add_sep, the chat template).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/empo2/empo2/gguf"
)

// ErrHFTokenizer is wrapped by every error about a Hugging Face tokenizer
// that cannot be read or converted.
var ErrHFTokenizer = errors.New("modelgen: Hugging Face tokenizer")

// Pre-tokenizer split regexes, as the Hugging Face tokenizer.json files of
// these families write them and as llama.cpp's llama-vocab.cpp implements
// them for the tokenizer.ggml.pre names below.
const (
	// Qwen2/2.5/3 (and Qwen1.5): single digits.
	regexQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3: numbers in groups of up to three digits.
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// preByRegex is the tokenizer.ggml.pre name convert_hf_to_gguf.py writes
// for each supported split regex. The converter itself identifies the
// pre-tokenizer by hashing transformers' tokenization of a check string
// (get_vocab_base_pre); without transformers, the regex is what decides how
// text is split, and llama.cpp applies exactly this regex under that name.
// Other names with the same regex (deepseek-r1-qwen, smaug-bpe, …) select
// the same or a near-identical llama.cpp pre-tokenizer.
var preByRegex = map[string]string{
	regexQwen2:  "qwen2",
	regexLlama3: "llama-bpe",
}

// ignoreMergesByPre is tokenizer.json's model.ignore_merges for each name:
// llama.cpp sets ignore_merges for llama-bpe (a word that is a whole token
// is not split) and not for qwen2, and does not read it from the GGUF.
var ignoreMergesByPre = map[string]bool{"qwen2": false, "llama-bpe": true}

// PreTokenizerRegex returns the split regex llama.cpp applies for a
// tokenizer.ggml.pre name, for the names empo2 reads and writes.
func PreTokenizerRegex(pre string) (string, bool) {
	switch pre {
	case "qwen2", "deepseek-r1-qwen":
		return regexQwen2, true
	case "llama-bpe", "llama3", "llama-v3":
		return regexLlama3, true
	}
	return "", false
}

// HFFile is one file of a Hugging Face tokenizer folder, kept byte for byte.
type HFFile struct {
	Name string
	Data []byte
}

// HFTokenizerFiles are the tokenizer files LoadHFTokenizer reads and keeps
// (tokenizer.json first); a model written with the tokenizer stores them and
// an HF export writes them back unchanged. config.json is read for its
// vocab_size and *_token_id values but not kept: an export writes its own.
var HFTokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
	"added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json"}

// GGUF keys the original files are stored under: tokenizer.json under the
// GGUF specification's own key for it, the others under HFFileKeyPrefix+name.
const (
	HFTokenizerJSONKey = "tokenizer.huggingface.json"
	HFFileKeyPrefix    = "empo2.hf_tokenizer."
)

// SpecialID is one special token id (Kind is bos, eos, unk, sep, pad, cls,
// mask, eot or eom).
type SpecialID struct {
	Kind string
	ID   int
}

// AddSpecial is one add_<kind>_token flag.
type AddSpecial struct {
	Kind  string
	Value bool
}

// HFTokenizer is a Hugging Face byte-level BPE tokenizer converted to a GGUF
// vocabulary. Build it with LoadHFTokenizer or ParseHFTokenizer.
type HFTokenizer struct {
	// Pre is tokenizer.ggml.pre.
	Pre string
	// Tokens and Types cover ids 0..len-1: the BPE vocabulary and the added
	// tokens under their ids (CONTROL when special or when they look
	// special, USER_DEFINED otherwise), ids no token has as [PADn] UNUSED.
	// Vocab pads them further to a model's vocabulary size.
	Tokens []string
	Types  []int32
	// Merges in rank order, "left right".
	Merges []string
	// ChatTemplate is tokenizer.chat_template ("" = none); NamedTemplates
	// are tokenizer.chat_template.<name> of a list-form template.
	ChatTemplate   string
	NamedTemplates map[string]string
	// ConfigVocabSize is config.json's vocab_size (0 without config.json):
	// the converter pads the vocabulary to it.
	ConfigVocabSize int
	// ConfigTokenIDs are config.json's <kind>_token_id values (nil without
	// config.json); they name the special tokens tokenizer_config.json does
	// not. A family preset supplies its real model's values when the folder
	// has no config.json.
	ConfigTokenIDs map[string]int
	// Files are the original files, kept byte for byte (HFTokenizerFiles
	// order); nil leaves them out of the GGUF, as llama.cpp's converter does.
	Files []HFFile

	index      map[string]int // token string → id
	kinds      []string       // special_token_types, eot/eom appended by the post-processor
	tcIDs      map[string]int // ids named by tokenizer_config.json
	addSpecial []AddSpecial
}

// LoadHFTokenizer reads a Hugging Face tokenizer folder (tokenizer.json and,
// when present, tokenizer_config.json, config.json, chat_template.jinja, …)
// or a tokenizer.json file (its folder's other files are read too).
func LoadHFTokenizer(path string) (*HFTokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHFTokenizer, err)
	}
	dir, main := path, "tokenizer.json"
	if !st.IsDir() {
		dir, main = filepath.Dir(path), filepath.Base(path)
	}
	files := map[string][]byte{}
	read := func(name, as string) error {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrHFTokenizer, err)
		}
		files[as] = b
		return nil
	}
	if err := read(main, "tokenizer.json"); err != nil {
		return nil, err
	}
	if files["tokenizer.json"] == nil {
		return nil, fmt.Errorf("%w: no tokenizer.json in %s (a Hugging Face tokenizer folder holds tokenizer.json and tokenizer_config.json)", ErrHFTokenizer, dir)
	}
	for _, name := range append(HFTokenizerFiles[1:], "config.json") {
		if err := read(name, name); err != nil {
			return nil, err
		}
	}
	// list-form chat templates: chat_template.jinja plus additional_chat_templates/*.jinja
	extra, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	sort.Strings(extra)
	for _, p := range extra {
		name := "additional_chat_templates/" + filepath.Base(p)
		if err := read(name, name); err != nil {
			return nil, err
		}
	}
	return ParseHFTokenizer(files)
}

// ParseHFTokenizer converts the files of a tokenizer folder, by name
// (tokenizer.json required; tokenizer_config.json, config.json,
// chat_template.jinja, chat_template.json,
// additional_chat_templates/NAME.jinja and the other HFTokenizerFiles
// optional).
func ParseHFTokenizer(files map[string][]byte) (*HFTokenizer, error) {
	var tj hfTokenizerJSON
	if err := json.Unmarshal(files["tokenizer.json"], &tj); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json: %v", ErrHFTokenizer, err)
	}
	var tc map[string]any // nil when absent, as the converter's tokenizer_config
	if b := files["tokenizer_config.json"]; b != nil {
		if err := json.Unmarshal(b, &tc); err != nil {
			return nil, fmt.Errorf("%w: tokenizer_config.json: %v", ErrHFTokenizer, err)
		}
	}
	t := &HFTokenizer{tcIDs: map[string]int{}}
	var err error
	if t.Pre, err = tj.preTokenizer(); err != nil {
		return nil, err
	}
	if err := t.vocabulary(&tj, tc); err != nil {
		return nil, err
	}
	if t.Merges, err = tj.merges(); err != nil {
		return nil, err
	}
	if err := t.special(&tj, tc, files); err != nil {
		return nil, err
	}
	if b := files["config.json"]; b != nil {
		if err := t.config(b); err != nil {
			return nil, err
		}
	}
	for _, name := range HFTokenizerFiles {
		if b, ok := files[name]; ok {
			t.Files = append(t.Files, HFFile{name, b})
		}
	}
	for _, name := range additionalTemplates(files) {
		t.Files = append(t.Files, HFFile{name, files[name]})
	}
	return t, nil
}

// hfAddedToken is an entry of tokenizer.json's added_tokens.
type hfAddedToken struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	Special    bool   `json:"special"`
	Normalized bool   `json:"normalized"`
}

type hfTokenizerJSON struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type         string          `json:"type"`
		Vocab        map[string]int  `json:"vocab"`
		Merges       json.RawMessage `json:"merges"`
		ByteFallback bool            `json:"byte_fallback"`
		IgnoreMerges bool            `json:"ignore_merges"`
	} `json:"model"`
}

// hfComponent is a normalizer, pre-tokenizer, post-processor or decoder.
type hfComponent struct {
	Type          string           `json:"type"`
	Pattern       json.RawMessage  `json:"pattern"`
	Behavior      string           `json:"behavior"`
	Invert        bool             `json:"invert"`
	UseRegex      *bool            `json:"use_regex"`
	Pretokenizers []hfComponent    `json:"pretokenizers"`
	Normalizers   []hfComponent    `json:"normalizers"`
	Processors    []hfComponent    `json:"processors"`
	Single        []hfTemplatePart `json:"single"`
	Pair          []hfTemplatePart `json:"pair"`
	Cls           []any            `json:"cls"`
	Sep           []any            `json:"sep"`
}

type hfTemplatePart struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

func (p hfTemplatePart) special() string {
	if p.SpecialToken == nil {
		return ""
	}
	return p.SpecialToken.ID
}

func (p hfTemplatePart) sequence() string {
	if p.Sequence == nil {
		return ""
	}
	return p.Sequence.ID
}

func component(raw json.RawMessage, what string) (*hfComponent, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json %s: %v", ErrHFTokenizer, what, err)
	}
	return &c, nil
}

// preTokenizer checks that the tokenizer is a byte-level BPE that llama.cpp
// reproduces and returns its tokenizer.ggml.pre name.
func (tj *hfTokenizerJSON) preTokenizer() (string, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format+" (supported: byte-level BPE tokenizers with the Qwen2 or Llama-3 split regex)", append([]any{ErrHFTokenizer}, a...)...)
	}
	if tj.Model.Type != "BPE" || tj.Model.ByteFallback {
		return "", bad("model type %q, byte_fallback %v", tj.Model.Type, tj.Model.ByteFallback)
	}
	dec, err := component(tj.Decoder, "decoder")
	if err != nil {
		return "", err
	}
	if dec == nil || dec.Type != "ByteLevel" {
		return "", bad("decoder is not ByteLevel")
	}
	// llama.cpp applies no normalizer. NFC is accepted: it changes only text
	// that is not already in NFC (see docs/models.md).
	norm, err := component(tj.Normalizer, "normalizer")
	if err != nil {
		return "", err
	}
	if norm != nil && norm.Type != "NFC" {
		return "", bad("normalizer %s, which llama.cpp does not apply", norm.Type)
	}
	pre, err := component(tj.PreTokenizer, "pre_tokenizer")
	if err != nil {
		return "", err
	}
	if pre == nil || pre.Type != "Sequence" || len(pre.Pretokenizers) != 2 {
		return "", bad("pre_tokenizer is not Sequence[Split, ByteLevel]")
	}
	split, bl := pre.Pretokenizers[0], pre.Pretokenizers[1]
	if split.Type != "Split" || split.Behavior != "Isolated" || split.Invert || bl.Type != "ByteLevel" || bl.UseRegex == nil || *bl.UseRegex {
		return "", bad("pre_tokenizer is not Sequence[Split(Isolated), ByteLevel(use_regex false)]")
	}
	var pattern struct {
		Regex *string `json:"Regex"`
	}
	if err := json.Unmarshal(split.Pattern, &pattern); err != nil || pattern.Regex == nil {
		return "", bad("split pattern is not a regex")
	}
	name, ok := preByRegex[*pattern.Regex]
	if !ok {
		return "", bad("unknown split regex %q", *pattern.Regex)
	}
	if tj.Model.IgnoreMerges != ignoreMergesByPre[name] {
		return "", bad("ignore_merges %v with the %s regex: llama.cpp uses %v for %s", tj.Model.IgnoreMerges, name, ignoreMergesByPre[name], name)
	}
	return name, nil
}

// merges returns model.merges as "left right" strings: the old string form
// as is, the [left, right] form (transformers ≥ 4.45) joined by a space
// with spaces inside a part written as U+0120, as SpecialVocab does.
func (tj *hfTokenizerJSON) merges() ([]string, error) {
	if len(tj.Model.Merges) == 0 || string(tj.Model.Merges) == "null" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal(tj.Model.Merges, &out); err == nil {
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(tj.Model.Merges, &pairs); err != nil {
		return nil, fmt.Errorf("%w: model.merges is neither [\"a b\", …] nor [[a, b], …]", ErrHFTokenizer)
	}
	sp := string(rune(' ' + 256))
	out = make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("%w: merge %d has %d parts", ErrHFTokenizer, i, len(p))
		}
		out[i] = strings.ReplaceAll(p[0], " ", sp) + " " + strings.ReplaceAll(p[1], " ", sp)
	}
	return out, nil
}

// looksSpecial is convert_hf_to_gguf.py's does_token_look_special.
func looksSpecial(s string) bool {
	switch s {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") ||
		strings.HasPrefix(s, "<｜") && strings.HasSuffix(s, "｜>") ||
		strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">")
}

// vocabulary fills Tokens and Types as get_vocab_base does: every id below
// the vocabulary size, the BPE vocabulary's tokens NORMAL, added tokens
// CONTROL (special, or special-looking) or USER_DEFINED (with U+2581 written
// as a space), ids without a token [PAD<id>] UNUSED.
func (t *HFTokenizer) vocabulary(tj *hfTokenizerJSON, tc map[string]any) error {
	byID := map[int]string{}
	added := map[int]hfAddedToken{}
	maxID := -1
	for s, id := range tj.Model.Vocab {
		if id < 0 || id >= 1<<24 {
			return fmt.Errorf("%w: token %q has id %d", ErrHFTokenizer, s, id)
		}
		if prev, dup := byID[id]; dup {
			return fmt.Errorf("%w: id %d is both %q and %q", ErrHFTokenizer, id, prev, s)
		}
		if _, ok := unmapSymbols(s); !ok {
			return fmt.Errorf("%w: token %q (id %d) is not in GPT-2's byte-level alphabet, so llama.cpp could not decode it", ErrHFTokenizer, s, id)
		}
		byID[id] = s
		maxID = max(maxID, id)
	}
	for i, a := range tj.AddedTokens {
		if a.ID == nil || *a.ID < 0 || *a.ID >= 1<<24 || a.Content == "" {
			return fmt.Errorf("%w: added token %d has no valid id or content", ErrHFTokenizer, i)
		}
		id := *a.ID
		if s, ok := byID[id]; ok && s != a.Content {
			return fmt.Errorf("%w: id %d is both %q (vocab) and %q (added token)", ErrHFTokenizer, id, s, a.Content)
		}
		if prev, dup := added[id]; dup && prev.Content != a.Content {
			return fmt.Errorf("%w: added tokens %q and %q share id %d", ErrHFTokenizer, prev.Content, a.Content, id)
		}
		if vid, ok := tj.Model.Vocab[a.Content]; ok && vid != id {
			return fmt.Errorf("%w: added token %q has id %d but the vocab gives it %d", ErrHFTokenizer, a.Content, id, vid)
		}
		added[id] = a
		maxID = max(maxID, id)
	}
	// tokenizer_config.json's added_tokens_decoder must say the same.
	if dec, ok := tc["added_tokens_decoder"].(map[string]any); ok {
		for k, v := range dec {
			m, _ := v.(map[string]any)
			var id int
			if _, err := fmt.Sscan(k, &id); err != nil || m == nil {
				return fmt.Errorf("%w: tokenizer_config.json added_tokens_decoder entry %q", ErrHFTokenizer, k)
			}
			a, ok := added[id]
			content, _ := m["content"].(string)
			special, _ := m["special"].(bool)
			if !ok || a.Content != content || a.Special != special {
				return fmt.Errorf("%w: tokenizer_config.json and tokenizer.json disagree about added token %d (%q)", ErrHFTokenizer, id, content)
			}
		}
	}
	n := maxID + 1
	if n == 0 {
		return fmt.Errorf("%w: empty vocabulary", ErrHFTokenizer)
	}
	t.Tokens, t.Types = make([]string, n), make([]int32, n)
	seen := make(map[string]int, n)
	for id := 0; id < n; id++ {
		s, typ := byID[id], gguf.TokenTypeNormal
		if a, ok := added[id]; ok {
			s = a.Content
			if a.Special || looksSpecial(s) {
				typ = gguf.TokenTypeControl
			} else {
				s, typ = strings.ReplaceAll(s, "\u2581", " "), gguf.TokenTypeUserDefined
			}
		} else if _, ok := byID[id]; !ok {
			s, typ = fmt.Sprintf("[PAD%d]", id), gguf.TokenTypeUnused
		}
		if prev, dup := seen[s]; dup {
			// llama.cpp asserts that token strings are unique
			return fmt.Errorf("%w: ids %d and %d are both %q", ErrHFTokenizer, prev, id, s)
		}
		seen[s] = id
		t.Tokens[id], t.Types[id] = s, typ
	}
	t.index = seen
	return nil
}

// HasFile reports whether Files holds a file of that name.
func (t *HFTokenizer) HasFile(name string) bool {
	for _, f := range t.Files {
		if f.Name == name {
			return true
		}
	}
	return false
}

// Vocab returns the tokens and types of a model with n tokens: Tokens and
// Types padded with [PAD<id>] UNUSED tokens, as get_vocab_base pads to
// config.json's vocab_size.
func (t *HFTokenizer) Vocab(n int) ([]string, []int32, error) {
	if n < len(t.Tokens) {
		return nil, nil, fmt.Errorf("%w: vocab %d is smaller than the tokenizer's %d tokens", ErrConfig, n, len(t.Tokens))
	}
	toks := append(make([]string, 0, n), t.Tokens...)
	types := append(make([]int32, 0, n), t.Types...)
	for id := len(toks); id < n; id++ {
		pad := fmt.Sprintf("[PAD%d]", id)
		if _, clash := t.index[pad]; clash {
			return nil, nil, fmt.Errorf("%w: padding token %q is already a token", ErrHFTokenizer, pad)
		}
		toks, types = append(toks, pad), append(types, gguf.TokenTypeUnused)
	}
	return toks, types, nil
}

// DefaultVocab is the vocabulary size the converter gives a model without
// another size: config.json's vocab_size, else the tokenizer's own size.
func (t *HFTokenizer) DefaultVocab() int {
	return max(t.ConfigVocabSize, len(t.Tokens))
}

// pyTruthy is Python's truth value of a JSON value.
func pyTruthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case float64:
		return x != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// pyEq is Python's == between a JSON value and a string.
func pyEq(v any, s string) bool { x, ok := v.(string); return ok && x == s }

// special reads the special tokens, add flags and chat template as
// SpecialVocab._try_load_from_tokenizer_json does.
func (t *HFTokenizer) special(tj *hfTokenizerJSON, tc map[string]any, files map[string][]byte) error {
	t.kinds = []string{"bos", "eos", "unk", "sep", "pad", "cls", "mask"}
	setAdd := func(kind string, v bool) {
		for i := range t.addSpecial {
			if t.addSpecial[i].Kind == kind {
				t.addSpecial[i].Value = v
				return
			}
		}
		t.addSpecial = append(t.addSpecial, AddSpecial{kind, v})
	}
	hasKind := func(k string) bool {
		for _, x := range t.kinds {
			if x == k {
				return true
			}
		}
		return false
	}
	get := func(k string) any { return tc[k] } // nil map reads as nil
	bos, cls, eos, sep := get("bos_token"), get("cls_token"), get("eos_token"), get("sep_token")
	tcTruthy := len(tc) > 0
	if !pyTruthy(bos) && pyTruthy(cls) && tcTruthy {
		tc["bos_token"], bos = cls, cls
	}
	if !pyTruthy(eos) && pyTruthy(sep) && tcTruthy {
		tc["eos_token"], eos = sep, sep
	}
	post, err := component(tj.PostProcessor, "post_processor")
	if err != nil {
		return err
	}
	if post != nil {
		procs := post.Processors
		if procs == nil {
			procs = []hfComponent{*post}
		}
		for _, p := range procs {
			switch p.Type {
			case "RobertaProcessing":
				setAdd("bos", true)
				setAdd("eos", true)
				setAdd("sep", true)
				if !pyTruthy(cls) && tcTruthy {
					cls = bos
					if len(p.Cls) > 0 {
						cls = p.Cls[0]
					}
					tc["cls_token"] = cls
				}
				if !pyTruthy(sep) && tcTruthy {
					sep = eos
					if len(p.Sep) > 0 {
						sep = p.Sep[0]
					}
					tc["sep_token"] = sep
				}
			case "TemplateProcessing":
				first, last := "", ""
				if len(p.Single) > 1 {
					if first = p.Single[0].special(); first != "" {
						if !tcTruthy {
							bos = first
						}
						setAdd("bos", pyEq(bos, first) || pyEq(cls, first))
					}
					if last = p.Single[len(p.Single)-1].special(); last != "" {
						if !tcTruthy {
							eos = last
						} else if !pyEq(eos, last) {
							if !hasKind("eot") {
								t.kinds = append(t.kinds, "eot")
								tc["eot_token"] = eos
							} else if !hasKind("eom") {
								t.kinds = append(t.kinds, "eom")
								tc["eom_token"] = eos
							}
							tc["eos_token"], eos = last, last
						}
						setAdd("eos", pyEq(eos, last))
					}
				}
				if pair := p.Pair; len(pair) > 0 {
					if first != "" && pair[0].special() == first {
						pair = pair[1:]
					}
					if last != "" && len(pair) > 0 && pair[len(pair)-1].special() == last {
						pair = pair[:len(pair)-1]
					}
					if len(pair) > 0 && pair[0].sequence() == "A" && pair[len(pair)-1].sequence() == "B" && len(pair) > 2 {
						mid := pair[1 : len(pair)-1]
						addSep := false
						if e := mid[0].special(); e != "" && (pyEq(sep, e) || pyEq(eos, e)) && last == "" {
							addSep = true
						}
						if len(mid) == 2 {
							if e := mid[1].special(); e != "" && (pyEq(sep, e) || pyEq(eos, e)) {
								addSep = true
							}
						}
						setAdd("sep", addSep)
						if addSep && !pyTruthy(sep) && tcTruthy {
							tc["sep_token"] = eos
						}
					}
				}
			}
		}
	}
	if !tcTruthy {
		return nil // the converter reads nothing more without tokenizer_config.json
	}
	if err := t.chatTemplates(tc, files); err != nil {
		return err
	}
	for _, kind := range t.kinds {
		if v, ok := tc["add_"+kind+"_token"].(bool); ok {
			setAdd(kind, v)
		}
		var content string
		switch e := tc[kind+"_token"].(type) {
		case string:
			content = e
		case map[string]any:
			c, ok := e["content"].(string)
			if !ok {
				continue
			}
			content = c
		default:
			continue
		}
		for _, a := range tj.AddedTokens { // the first added token with that content
			if a.Content == content {
				if _, set := t.tcIDs[kind]; !set {
					t.tcIDs[kind] = *a.ID
				}
				break
			}
		}
	}
	return nil
}

// chatTemplates reads tokenizer_config.json's chat_template, or else
// chat_template.jinja (with additional_chat_templates/*.jinja, the list
// form) or chat_template.json.
func (t *HFTokenizer) chatTemplates(tc map[string]any, files map[string][]byte) error {
	v, ok := tc["chat_template"]
	if !ok {
		if b, ok := files["chat_template.jinja"]; ok {
			v = string(b)
			if extra := additionalTemplates(files); len(extra) > 0 {
				list := []any{map[string]any{"name": "default", "template": string(b)}}
				for _, name := range extra {
					stem := strings.TrimSuffix(strings.TrimPrefix(name, "additional_chat_templates/"), ".jinja")
					list = append(list, map[string]any{"name": stem, "template": string(files[name])})
				}
				v = list
			}
		} else if b, ok := files["chat_template.json"]; ok {
			var ct map[string]any
			if err := json.Unmarshal(b, &ct); err != nil {
				return fmt.Errorf("%w: chat_template.json: %v", ErrHFTokenizer, err)
			}
			v = ct["chat_template"]
		}
	}
	switch x := v.(type) {
	case string:
		t.ChatTemplate = x
	case []any: // gguf_writer.add_chat_template's list form
		for _, c := range x {
			m, _ := c.(map[string]any)
			name, _ := m["name"].(string)
			tmpl, ok := m["template"].(string)
			if name == "" || !ok {
				continue
			}
			clean := strings.Map(func(r rune) rune {
				if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
					return r
				}
				return '_'
			}, name)
			if clean == "default" {
				t.ChatTemplate = tmpl
				continue
			}
			if t.NamedTemplates == nil {
				t.NamedTemplates = map[string]string{}
			}
			t.NamedTemplates[clean] = tmpl
		}
	}
	return nil
}

// additionalTemplates are the additional_chat_templates/NAME.jinja files, sorted.
func additionalTemplates(files map[string][]byte) []string {
	var extra []string
	for name := range files {
		if strings.HasPrefix(name, "additional_chat_templates/") && strings.HasSuffix(name, ".jinja") {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	return extra
}

// config reads config.json's vocab_size and <kind>_token_id values (at the
// top level or in text_config).
func (t *HFTokenizer) config(b []byte) error {
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("%w: config.json: %v", ErrHFTokenizer, err)
	}
	text, _ := c["text_config"].(map[string]any)
	if v, ok := c["vocab_size"].(float64); ok && v > 0 && v < 1<<24 && v == float64(int(v)) {
		t.ConfigVocabSize = int(v)
	}
	t.ConfigTokenIDs = map[string]int{}
	for _, kind := range t.kinds {
		v, ok := c[kind+"_token_id"]
		if !ok || v == nil {
			v = text[kind+"_token_id"]
		}
		if f, ok := v.(float64); ok && f >= 0 && f == float64(int(f)) {
			t.ConfigTokenIDs[kind] = int(f) // a list (several EOS ids) is not an id
		}
	}
	return nil
}

// SpecialIDs are the special token ids in the order the converter writes
// them: those tokenizer_config.json names, then config.json's (or the
// preset's) for the kinds still unset.
func (t *HFTokenizer) SpecialIDs() []SpecialID {
	var out []SpecialID
	set := map[string]bool{}
	for _, kind := range t.kinds {
		if id, ok := t.tcIDs[kind]; ok {
			out = append(out, SpecialID{kind, id})
			set[kind] = true
		}
	}
	for _, kind := range t.kinds {
		if id, ok := t.ConfigTokenIDs[kind]; ok && !set[kind] {
			out = append(out, SpecialID{kind, id})
		}
	}
	return out
}

// AddSpecialFlags are the add_<kind>_token flags the converter writes (it
// has GGUF keys for bos, eos and sep only).
func (t *HFTokenizer) AddSpecialFlags() []AddSpecial {
	var out []AddSpecial
	for _, a := range t.addSpecial {
		if a.Kind == "bos" || a.Kind == "eos" || a.Kind == "sep" {
			out = append(out, a)
		}
	}
	return out
}

// specialIDKey is the GGUF key of each special token kind.
var specialIDKey = map[string]string{
	"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
	"unk": "tokenizer.ggml.unknown_token_id", "sep": "tokenizer.ggml.seperator_token_id",
	"pad": "tokenizer.ggml.padding_token_id", "cls": "tokenizer.ggml.cls_token_id",
	"mask": "tokenizer.ggml.mask_token_id", "eot": "tokenizer.ggml.eot_token_id",
	"eom": "tokenizer.ggml.eom_token_id",
}

// AddTo writes the vocabulary of an n-token model to w, key by key as
// convert_hf_to_gguf.py writes it, then (unless Files is nil) the original
// files under HFTokenizerJSONKey and HFFileKeyPrefix+name.
func (t *HFTokenizer) AddTo(w *gguf.Writer, n int) error {
	toks, types, err := t.Vocab(n)
	if err != nil {
		return err
	}
	w.AddKV("tokenizer.ggml.model", "gpt2")
	w.AddKV("tokenizer.ggml.pre", t.Pre)
	w.AddKV("tokenizer.ggml.tokens", toks)
	w.AddKV("tokenizer.ggml.token_type", types)
	w.AddKV("tokenizer.ggml.merges", t.Merges)
	for _, s := range t.SpecialIDs() {
		w.AddKV(specialIDKey[s.Kind], uint32(s.ID))
	}
	for _, a := range t.AddSpecialFlags() {
		w.AddKV("tokenizer.ggml.add_"+a.Kind+"_token", a.Value)
	}
	if len(t.NamedTemplates) > 0 {
		names := make([]string, 0, len(t.NamedTemplates))
		for name := range t.NamedTemplates {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			w.AddKV("tokenizer.chat_template."+name, t.NamedTemplates[name])
		}
		w.AddKV("tokenizer.chat_templates", names)
	}
	if t.ChatTemplate != "" {
		w.AddKV("tokenizer.chat_template", t.ChatTemplate)
	}
	for _, f := range t.Files {
		if f.Name == "tokenizer.json" {
			w.AddKV(HFTokenizerJSONKey, string(f.Data))
		} else {
			w.AddKV(HFFileKeyPrefix+f.Name, string(f.Data))
		}
	}
	return nil
}

// MetadataBytes is about the size of the metadata AddTo writes for an
// n-token model.
func (t *HFTokenizer) MetadataBytes(n int) int64 {
	b := int64(12 * n) // string lengths, token types
	for _, s := range t.Tokens {
		b += int64(len(s))
	}
	b += int64(len("[PAD000000]")) * int64(max(0, n-len(t.Tokens)))
	for _, m := range t.Merges {
		b += 8 + int64(len(m))
	}
	b += int64(len(t.ChatTemplate))
	for _, s := range t.NamedTemplates {
		b += int64(len(s))
	}
	for _, f := range t.Files {
		b += 64 + int64(len(f.Data))
	}
	return b
}

// StoredHFTokenizer returns the Hugging Face tokenizer files a GGUF carries
// (written by AddTo), converted; nil when it carries none.
func StoredHFTokenizer(f *gguf.File) (*HFTokenizer, error) {
	tj, ok := f.String(HFTokenizerJSONKey)
	if !ok {
		return nil, nil
	}
	files := map[string][]byte{"tokenizer.json": []byte(tj)}
	for _, k := range f.Keys() {
		if name, ok := strings.CutPrefix(k, HFFileKeyPrefix); ok {
			s, ok := f.String(k)
			if !ok {
				return nil, fmt.Errorf("%w: %s is not a string", ErrHFTokenizer, k)
			}
			files[name] = []byte(s)
		}
	}
	return ParseHFTokenizer(files)
}

// Matches reports whether the GGUF's vocabulary is exactly what this
// tokenizer converts to (pre-tokenizer, tokens padded to the GGUF's size,
// token types, merges): then both tokenize every text alike. The error
// names the first difference.
func (t *HFTokenizer) Matches(f *gguf.File) error {
	diff := func(format string, a ...any) error {
		return fmt.Errorf("%w: the GGUF vocabulary differs from the tokenizer files: "+format, append([]any{ErrHFTokenizer}, a...)...)
	}
	if m, _ := f.String("tokenizer.ggml.model"); m != "gpt2" {
		return diff("tokenizer.ggml.model %q, not gpt2", m)
	}
	if p, _ := f.String("tokenizer.ggml.pre"); p != t.Pre {
		if ra, _ := PreTokenizerRegex(p); ra == "" || ra != preRegex(t.Pre) {
			return diff("pre-tokenizer %q, the files' is %q", p, t.Pre)
		}
	}
	gt, _ := f.Strings("tokenizer.ggml.tokens")
	toks, types, err := t.Vocab(len(gt))
	if err != nil {
		return diff("%d tokens, the files have %d", len(gt), len(t.Tokens))
	}
	for i := range toks {
		if gt[i] != toks[i] {
			return diff("token %d is %q, the files' %q", i, gt[i], toks[i])
		}
	}
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		gty, ok := v.([]int32)
		if !ok || len(gty) != len(types) {
			return diff("tokenizer.ggml.token_type is not %d int32 values", len(types))
		}
		for i := range types {
			if gty[i] != types[i] {
				return diff("token %d (%q) has type %d, the files give %d", i, toks[i], gty[i], types[i])
			}
		}
	} else {
		return diff("no tokenizer.ggml.token_type")
	}
	gm, _ := f.Strings("tokenizer.ggml.merges")
	if len(gm) != len(t.Merges) {
		return diff("%d merges, the files have %d", len(gm), len(t.Merges))
	}
	for i := range gm {
		if gm[i] != t.Merges[i] {
			return diff("merge %d is %q, the files' %q", i, gm[i], t.Merges[i])
		}
	}
	return nil
}

func preRegex(pre string) string { r, _ := PreTokenizerRegex(pre); return r }
