package modelgen

import (
	"container/heap"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/empo2/empo2/gguf"
)

// Special tokens, ChatML as in Qwen2.5; they follow the learned vocabulary.
const (
	TokEndOfText = "<|endoftext|>"
	TokImStart   = "<|im_start|>"
	TokImEnd     = "<|im_end|>"
)

// Specials lists the control tokens in vocabulary order.
var Specials = []string{TokEndOfText, TokImStart, TokImEnd}

// Tokenizer is a byte-level BPE vocabulary in GPT-2/Qwen2 form: token strings
// are UTF-8 text over GPT-2's byte-to-unicode alphabet, merges are "left right"
// pairs in rank order.
type Tokenizer struct {
	Tokens []string
	Types  []int32
	Merges []string
	// Learned is how many tokens beyond the 256 bytes came from merges; when
	// the corpus is exhausted before the requested size, the rest of the
	// vocabulary is padding: [PADn] tokens of type unused, which llama.cpp
	// never produces when tokenizing (Qwen's GGUFs pad their vocabulary the
	// same way).
	Learned int

	ids   map[string]int32
	ranks map[[2]string]int
}

var byteToRune, runeToByte = buildByteMaps()

// buildByteMaps is GPT-2's bytes_to_unicode: printable bytes map to
// themselves, the others to U+0100 upwards, in byte order.
func buildByteMaps() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}

// ByteSymbol returns the vocabulary string of byte b.
func ByteSymbol(b byte) string { return string(byteToRune[b]) }

// mapBytes maps raw bytes to their symbol string.
func mapBytes(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteToRune[s[i]])
	}
	return sb.String()
}

// unmapSymbols turns a token string back into raw bytes.
func unmapSymbols(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// decodeUTF8 decodes text exactly as llama.cpp's unicode_cpts_from_utf8:
// lenient about overlong forms and surrogates, one U+FFFD per byte it cannot
// decode.
func decodeUTF8(s string) []rune {
	out := make([]rune, 0, len(s))
	cont := func(i int) bool { return i < len(s) && s[i]&0xc0 == 0x80 }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c&0x80 == 0:
			out = append(out, rune(c))
			i++
			continue
		case c&0x40 == 0:
		case c&0x20 == 0:
			if cont(i + 1) {
				out = append(out, rune(c&0x1f)<<6|rune(s[i+1]&0x3f))
				i += 2
				continue
			}
		case c&0x10 == 0:
			if cont(i+1) && cont(i+2) {
				out = append(out, rune(c&0x0f)<<12|rune(s[i+1]&0x3f)<<6|rune(s[i+2]&0x3f))
				i += 3
				continue
			}
		case c&0x08 == 0:
			if cont(i+1) && cont(i+2) && cont(i+3) {
				out = append(out, rune(c&0x07)<<18|rune(s[i+1]&0x3f)<<12|rune(s[i+2]&0x3f)<<6|rune(s[i+3]&0x3f))
				i += 4
				continue
			}
		}
		out = append(out, utf8.RuneError)
		i++
	}
	return out
}

// encodeUTF8 encodes code points as llama.cpp's unicode_cpt_to_utf8 (which
// also encodes surrogates); code points beyond U+10FFFF become U+FFFD.
func encodeUTF8(cps []rune) string {
	b := make([]byte, 0, len(cps)*2)
	for _, c := range cps {
		switch {
		case c < 0 || c > 0x10ffff:
			b = utf8.AppendRune(b, utf8.RuneError)
		case c <= 0x7f:
			b = append(b, byte(c))
		case c <= 0x7ff:
			b = append(b, 0xc0|byte(c>>6), 0x80|byte(c&0x3f))
		case c <= 0xffff:
			b = append(b, 0xe0|byte(c>>12), 0x80|byte(c>>6&0x3f), 0x80|byte(c&0x3f))
		default:
			b = append(b, 0xf0|byte(c>>18), 0x80|byte(c>>12&0x3f), 0x80|byte(c>>6&0x3f), 0x80|byte(c&0x3f))
		}
	}
	return string(b)
}

// isDefined reports whether r has a Unicode general category (llama.cpp's
// flags are zero for unassigned code points).
func isDefined(r rune) bool {
	return r <= 0x10ffff && unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
}

func isWS(r rune) bool     { return unicode.IsSpace(r) }
func isLetter(r rune) bool { return unicode.IsLetter(r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) }

// PreTokenize splits text into words like llama.cpp's "qwen2" pre-tokenizer,
// whose regex is
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (a port of llama.cpp's hand-written matcher for the llama3 variant, with
// single digits as in Qwen2).
func PreTokenize(text string) []string {
	// Like llama.cpp, work on code points: an invalid UTF-8 byte becomes
	// U+FFFD and words are re-encoded from code points.
	cp := decodeUTF8(text)
	n := len(cp)
	const oor = rune(-1)
	get := func(p int) rune {
		if p >= 0 && p < n {
			return cp[p]
		}
		return oor
	}
	letter := func(p int) bool { return p < n && isLetter(cp[p]) }
	ws := func(p int) bool { return p < n && isWS(cp[p]) }

	var words []string
	prev := 0
	add := func(end int) int {
		l := end - prev
		if l > 0 {
			words = append(words, encodeUTF8(cp[prev:end]))
		}
		prev = end
		return l
	}
	for pos := 0; pos < n; {
		c := cp[pos]
		if c == '\'' && pos+1 < n {
			nx := unicode.ToLower(get(pos + 1))
			if nx == 's' || nx == 't' || nx == 'm' || nx == 'd' {
				pos += add(pos + 2)
				continue
			}
			if pos+2 < n {
				nn := unicode.ToLower(get(pos + 2))
				if (nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') || (nx == 'l' && nn == 'l') {
					pos += add(pos + 3)
					continue
				}
			}
		}
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if !(c == '\r' || c == '\n' || isNumber(c)) {
			if isLetter(c) || letter(pos+1) {
				pos++
				for letter(pos) {
					pos++
				}
				add(pos)
				continue
			}
		}
		// \p{N}
		if isNumber(c) {
			pos++
			add(pos)
			continue
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		p2 := pos
		if c == ' ' {
			p2 = pos + 1
		}
		punct := func(p int) bool {
			return p < n && !isWS(cp[p]) && !isLetter(cp[p]) && !isNumber(cp[p]) && isDefined(cp[p])
		}
		if punct(p2) {
			pos = p2
			for punct(pos) {
				pos++
			}
			for get(pos) == '\r' || get(pos) == '\n' {
				pos++
			}
			add(pos)
			continue
		}
		nws, lastNL := 0, 0
		for ws(pos + nws) {
			if c2 := cp[pos+nws]; c2 == '\r' || c2 == '\n' {
				lastNL = pos + nws + 1
			}
			nws++
		}
		if lastNL > 0 { // \s*[\r\n]+
			pos = lastNL
			add(pos)
			continue
		}
		if nws > 1 && pos+nws < n { // \s+(?!\S)
			pos += nws - 1
			add(pos)
			continue
		}
		if nws > 0 { // \s+
			pos += nws
			add(pos)
			continue
		}
		pos++
		add(pos)
	}
	return words
}

type bpePair struct{ a, b int32 }

type heapItem struct {
	count int
	p     bpePair
}

type pairHeap []heapItem

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count > h[j].count
	}
	if h[i].p.a != h[j].p.a {
		return h[i].p.a < h[j].p.a
	}
	return h[i].p.b < h[j].p.b
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(heapItem)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// TrainTokenizer learns a byte-level BPE vocabulary of exactly vocab tokens
// from corpus: the 256 byte symbols, learned merges, the ChatML specials and,
// if the corpus runs out of pairs, [PADn] padding. Deterministic: ties between
// equally frequent pairs go to the pair of lowest token ids.
func TrainTokenizer(corpus string, vocab int) (*Tokenizer, error) {
	minVocab := 256 + len(Specials) + 1
	if vocab < minVocab {
		return nil, fmt.Errorf("%w: vocab %d < %d (256 bytes + %d specials + 1 merge)", ErrConfig, vocab, minVocab, len(Specials))
	}
	target := vocab - len(Specials) // bytes + learned (+ pads at the end)
	tok := &Tokenizer{}
	tok.ids = map[string]int32{}
	addTok := func(s string, t int32) int32 {
		id := int32(len(tok.Tokens))
		tok.Tokens = append(tok.Tokens, s)
		tok.Types = append(tok.Types, t)
		tok.ids[s] = id
		return id
	}
	for b := 0; b < 256; b++ {
		addTok(ByteSymbol(byte(b)), gguf.TokenTypeNormal)
	}

	// word frequencies, in first-seen order for determinism
	type word struct {
		syms  []int32
		count int
	}
	var words []word
	index := map[string]int{}
	for _, w := range PreTokenize(corpus) {
		if i, ok := index[w]; ok {
			words[i].count++
			continue
		}
		index[w] = len(words)
		syms := make([]int32, len(w))
		for i := 0; i < len(w); i++ {
			syms[i] = int32(w[i])
		}
		words = append(words, word{syms: syms, count: 1})
	}
	counts := map[bpePair]int{}
	where := map[bpePair][]int32{}
	for wi, w := range words {
		for i := 0; i+1 < len(w.syms); i++ {
			p := bpePair{w.syms[i], w.syms[i+1]}
			counts[p] += w.count
			where[p] = append(where[p], int32(wi))
		}
	}
	h := make(pairHeap, 0, len(counts))
	for p, c := range counts {
		h = append(h, heapItem{c, p})
	}
	heap.Init(&h)

	touched := map[bpePair]bool{}
	for len(tok.Tokens) < target && h.Len() > 0 {
		it := heap.Pop(&h).(heapItem)
		if c := counts[it.p]; c != it.count || c <= 0 {
			continue // stale entry
		}
		p := it.p
		s := tok.Tokens[p.a] + tok.Tokens[p.b]
		nid, ok := tok.ids[s]
		if !ok {
			nid = addTok(s, gguf.TokenTypeNormal)
			tok.Learned++
		}
		tok.Merges = append(tok.Merges, tok.Tokens[p.a]+" "+tok.Tokens[p.b])
		clear(touched)
		seen := map[int32]bool{}
		for _, wi := range where[p] {
			if seen[wi] {
				continue
			}
			seen[wi] = true
			w := &words[wi]
			has := false
			for i := 0; i+1 < len(w.syms); i++ {
				if w.syms[i] == p.a && w.syms[i+1] == p.b {
					has = true
					break
				}
			}
			if !has {
				continue
			}
			for i := 0; i+1 < len(w.syms); i++ {
				q := bpePair{w.syms[i], w.syms[i+1]}
				counts[q] -= w.count
				touched[q] = true
			}
			out := w.syms[:0:0]
			for i := 0; i < len(w.syms); i++ {
				if i+1 < len(w.syms) && w.syms[i] == p.a && w.syms[i+1] == p.b {
					out = append(out, nid)
					i++
				} else {
					out = append(out, w.syms[i])
				}
			}
			w.syms = out
			for i := 0; i+1 < len(w.syms); i++ {
				q := bpePair{w.syms[i], w.syms[i+1]}
				counts[q] += w.count
				touched[q] = true
				where[q] = append(where[q], wi)
			}
		}
		delete(where, p)
		// push touched pairs in a deterministic order (heap order is total,
		// so push order does not matter for the result)
		for q := range touched {
			if c := counts[q]; c > 0 {
				heap.Push(&h, heapItem{c, q})
			} else {
				delete(counts, q)
			}
		}
	}
	for _, s := range Specials {
		addTok(s, gguf.TokenTypeControl)
	}
	for i := 0; len(tok.Tokens) < vocab; i++ {
		addTok(fmt.Sprintf("[PAD%d]", len(tok.Tokens)), gguf.TokenTypeUnused)
	}
	tok.buildRanks()
	return tok, nil
}

func (t *Tokenizer) buildRanks() {
	t.ranks = make(map[[2]string]int, len(t.Merges))
	for i, m := range t.Merges {
		a, b, _ := strings.Cut(m, " ")
		if _, dup := t.ranks[[2]string{a, b}]; !dup {
			t.ranks[[2]string{a, b}] = i
		}
	}
	if t.ids == nil {
		t.ids = map[string]int32{}
		for i, s := range t.Tokens {
			t.ids[s] = int32(i)
		}
	}
}

// ID returns the id of a token string.
func (t *Tokenizer) ID(tok string) (int32, bool) { id, ok := t.ids[tok]; return id, ok }

// Encode tokenizes text (no special-token parsing) the way llama.cpp's BPE
// tokenizer does with this vocabulary: pre-tokenize, then apply merges by rank
// inside each word.
func (t *Tokenizer) Encode(text string) []int32 {
	var out []int32
	for _, w := range PreTokenize(text) {
		syms := make([]string, len(w))
		for i := 0; i < len(w); i++ {
			syms[i] = ByteSymbol(w[i])
		}
		for len(syms) > 1 {
			best, bi := -1, -1
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
					best, bi = r, i
				}
			}
			if bi < 0 {
				break
			}
			a, b := syms[bi], syms[bi+1]
			merged := syms[:0:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
					merged = append(merged, a+b)
					i++
				} else {
					merged = append(merged, syms[i])
				}
			}
			syms = merged
		}
		for _, s := range syms {
			if id, ok := t.ids[s]; ok {
				out = append(out, id)
				continue
			}
			raw, _ := unmapSymbols(s)
			for _, b := range raw {
				out = append(out, int32(b))
			}
		}
	}
	return out
}

// Decode turns ids back into text; control tokens are rendered as their text.
func (t *Tokenizer) Decode(ids []int32) string {
	var sb strings.Builder
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.Tokens) {
			continue
		}
		s := t.Tokens[id]
		if t.Types[id] != gguf.TokenTypeNormal {
			sb.WriteString(s)
			continue
		}
		raw, ok := unmapSymbols(s)
		if !ok {
			sb.WriteString(s)
			continue
		}
		sb.Write(raw)
	}
	return sb.String()
}
