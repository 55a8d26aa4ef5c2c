package webshop

import (
	"math"
	"math/bits"
	"strings"
	"unicode"
	"unicode/utf16"
)

// Text analysis and scoring as the original's search engine does it: a
// Pyserini (Anserini) Lucene index built with DefaultLuceneDocumentGenerator
// and searched with Anserini's defaults — DefaultEnglishAnalyzer with the
// Porter stemmer (StandardTokenizer → EnglishPossessiveFilter →
// LowerCaseFilter → StopFilter(EnglishAnalyzer's stop set) →
// PorterStemFilter), BM25Similarity(k1 0.9, b 0.4), a bag-of-words query
// (one SHOULD clause per distinct term, boosted by its count) and ties
// broken by the document id (the ASIN) as a string.
//
// Versions: the original pins pyserini 0.17.0, which bundles Anserini
// 0.14, built on Lucene 8.3.0 (Anserini moved to Lucene 8.3 in 0.7.0 and
// pyserini to Lucene 9 only in 0.18.0). Lucene 8.3's BM25Similarity has no
// (k1 + 1) numerator factor (removed in 8.0, LUCENE-8563) and scores
// weight · (float)(freq / (freq + norm)) in double with a float norm cache;
// the later weight − weight/(1 + freq·normInverse) form is Lucene 8.4+
// (LUCENE-9071) and can differ in the last bit.

// analyze is Anserini's DefaultEnglishAnalyzer: the terms of text, in order.
func analyze(text string) []string { return analyzeCached(text, nil) }

// analyzeCached is analyze with a memo of token → term ("" for a dropped
// token), shared across the documents of an index.
func analyzeCached(text string, memo map[string]string) []string {
	toks := standardTokens(text)
	out := toks[:0]
	for _, tok := range toks {
		term, ok := memo[tok]
		if !ok {
			term = strings.ToLower(stripPossessive(tok))
			if stopWords[term] {
				term = ""
			}
			if term != "" {
				term = porterStem(term)
			}
			if memo != nil {
				memo[tok] = term
			}
		}
		if term != "" {
			out = append(out, term)
		}
	}
	return out
}

// stopWords is EnglishAnalyzer.ENGLISH_STOP_WORDS_SET.
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "but": true,
	"by": true, "for": true, "if": true, "in": true, "into": true, "is": true, "it": true, "no": true,
	"not": true, "of": true, "on": true, "or": true, "such": true, "that": true, "the": true,
	"their": true, "then": true, "there": true, "these": true, "they": true, "this": true, "to": true,
	"was": true, "will": true, "with": true,
}

// stripPossessive is EnglishPossessiveFilter: a trailing 's or 'S (with the
// apostrophe U+0027, U+2019 or U+FF07) is removed; it runs before
// lower-casing.
func stripPossessive(t string) string {
	for _, suf := range []string{"'s", "'S", "\u2019s", "\u2019S", "\uff07s", "\uff07S"} {
		if strings.HasSuffix(t, suf) {
			return t[:len(t)-len(suf)]
		}
	}
	return t
}

// --- StandardTokenizer (UAX#29 word boundaries) ---

// wbClass is a Word_Break property value of UAX#29.
type wbClass uint8

const (
	wbOther wbClass = iota
	wbALetter
	wbHebrew
	wbNumeric
	wbKatakana
	wbExtendNumLet
	wbMidLetter
	wbMidNum
	wbMidNumLet
	wbSingleQuote
	wbDoubleQuote
	wbExtend // Extend, Format and ZWJ: absorbed by the preceding character (WB4)
	wbIdeo   // ideographs and Hiragana: one token per character
	wbSEA    // South-East Asian scripts (complex context): a run is one token
)

var seaScripts = []*unicode.RangeTable{unicode.Thai, unicode.Lao, unicode.Myanmar, unicode.Khmer,
	unicode.Tai_Le, unicode.New_Tai_Lue, unicode.Tai_Tham, unicode.Tai_Viet}

// wordBreak approximates the Word_Break property from Go's Unicode tables
// (exact for ASCII and Latin text; the lists of UAX#29 for the
// punctuation classes).
func wordBreak(r rune) wbClass {
	switch r {
	case '\'':
		return wbSingleQuote
	case '"':
		return wbDoubleQuote
	case '.', 0x2018, 0x2019, 0x2024, 0xFE52, 0xFF07, 0xFF0E:
		return wbMidNumLet
	case ':', 0x00B7, 0x0387, 0x055F, 0x05F4, 0x2027, 0xFE13, 0xFE55, 0xFF1A:
		return wbMidLetter
	case ',', ';', 0x037E, 0x0589, 0x060C, 0x060D, 0x066C, 0x07F8, 0x2044, 0xFE10, 0xFE14, 0xFE50, 0xFE54, 0xFF0C, 0xFF1B:
		return wbMidNum
	case 0x202F:
		return wbExtendNumLet
	case 0x200C, 0x200D:
		return wbExtend
	case 0x30FC, 0x3031, 0x3032, 0x3033, 0x3034, 0x3035, 0x309B, 0x309C, 0x30A0, 0xFF70:
		return wbKatakana
	}
	switch {
	case r < 0x80:
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			return wbALetter
		case r >= '0' && r <= '9':
			return wbNumeric
		case r == '_':
			return wbExtendNumLet
		}
		return wbOther
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc):
		return wbExtend
	case unicode.Is(unicode.Cf, r) && r != 0x200B:
		return wbExtend
	case unicode.Is(unicode.Pc, r):
		return wbExtendNumLet
	case unicode.Is(unicode.Nd, r):
		return wbNumeric
	case unicode.Is(unicode.Katakana, r):
		return wbKatakana
	case unicode.Is(unicode.Hiragana, r), unicode.Is(unicode.Ideographic, r), unicode.Is(unicode.Han, r):
		return wbIdeo
	case unicode.In(r, seaScripts...):
		return wbSEA
	case unicode.Is(unicode.Hebrew, r) && unicode.IsLetter(r):
		return wbHebrew
	case unicode.IsLetter(r) || unicode.Is(unicode.Nl, r):
		return wbALetter
	}
	return wbOther
}

func isAH(c wbClass) bool { return c == wbALetter || c == wbHebrew }

// maxTokenLength is StandardTokenizer's default: longer tokens are cut
// into pieces of this many characters.
const maxTokenLength = 255

// standardTokens splits text as Lucene's StandardTokenizer does: UAX#29
// word segments that hold a letter or a digit ("7.5", "3.5oz", "women's",
// "b08x2pkkb2", "u.s.a" stay whole; "x-large" is two tokens), each
// ideograph and Hiragana character alone, runs of South-East Asian letters
// whole; punctuation, symbols, spaces and emoji are dropped.
func standardTokens(text string) []string {
	rs := []rune(text)
	cls := make([]wbClass, len(rs))
	for i, r := range rs {
		cls[i] = wordBreak(r)
	}
	// next returns the index of the first non-Extend character at or after i.
	next := func(i int) int {
		for i < len(rs) && cls[i] == wbExtend {
			i++
		}
		return i
	}
	var out []string
	emit := func(lo, hi int) {
		word := false
		for i := lo; i < hi; i++ {
			switch cls[i] {
			case wbALetter, wbHebrew, wbNumeric, wbKatakana, wbIdeo, wbSEA:
				word = true
			}
		}
		if !word {
			return
		}
		for hi-lo > maxTokenLength {
			out = append(out, string(rs[lo:lo+maxTokenLength]))
			lo += maxTokenLength
		}
		out = append(out, string(rs[lo:hi]))
	}
	for i := 0; i < len(rs); {
		c := cls[i]
		start := i
		switch c {
		case wbIdeo:
			i = next(i + 1)
			emit(start, i)
			continue
		case wbSEA:
			i++
			for i < len(rs) && (cls[i] == wbSEA || cls[i] == wbExtend) {
				i++
			}
			emit(start, i)
			continue
		case wbALetter, wbHebrew, wbNumeric, wbKatakana, wbExtendNumLet:
		default:
			i++
			continue
		}
		// Extend the word while no boundary rule applies (WB5–WB13b).
		prev := c
		i = next(i + 1)
		for i < len(rs) {
			cur := cls[i]
			joined := false
			switch {
			case isAH(prev) && isAH(cur), // WB5
				prev == wbNumeric && cur == wbNumeric,   // WB8
				isAH(prev) && cur == wbNumeric,          // WB9
				prev == wbNumeric && isAH(cur),          // WB10
				prev == wbKatakana && cur == wbKatakana, // WB13
				(isAH(prev) || prev == wbNumeric || prev == wbKatakana || prev == wbExtendNumLet) && cur == wbExtendNumLet, // WB13a
				prev == wbExtendNumLet && (isAH(cur) || cur == wbNumeric || cur == wbKatakana):                             // WB13b
				joined = true
			case isAH(prev) && (cur == wbMidLetter || cur == wbMidNumLet || cur == wbSingleQuote):
				// WB6/WB7: a letter, a mid-word character, a letter.
				if j := next(i + 1); j < len(rs) && isAH(cls[j]) {
					i, cur, joined = j, cls[j], true
				} else if prev == wbHebrew && cur == wbSingleQuote { // WB7a
					joined = true
				}
			case prev == wbHebrew && cur == wbDoubleQuote: // WB7b/c
				if j := next(i + 1); j < len(rs) && cls[j] == wbHebrew {
					i, cur, joined = j, cls[j], true
				}
			case prev == wbNumeric && (cur == wbMidNum || cur == wbMidNumLet || cur == wbSingleQuote):
				// WB11/WB12: a digit, a separator, a digit ("7.5", "1,000").
				if j := next(i + 1); j < len(rs) && cls[j] == wbNumeric {
					i, cur, joined = j, cls[j], true
				}
			}
			if !joined {
				break
			}
			prev = cur
			i = next(i + 1)
		}
		emit(start, i)
	}
	return out
}

// --- PorterStemFilter (Lucene's PorterStemmer: Porter 1980, release 3 of
// the reference implementation with its departures "bli" → "ble" and
// "logi" → "log") ---

// porterStem stems a lower-cased term. Like Lucene it works on UTF-16 code
// units, treats every character other than a, e, i, o, u (and y after a
// consonant) as a consonant, and leaves terms of one or two units alone.
func porterStem(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	var b []uint16
	if ascii {
		b = make([]uint16, len(s))
		for i := 0; i < len(s); i++ {
			b[i] = uint16(s[i])
		}
	} else {
		b = utf16.Encode([]rune(s))
	}
	st := porter{b: b, k: len(b) - 1}
	if st.k > 1 {
		st.step1()
		st.step2()
		st.step3()
		st.step4()
		st.step5()
		st.step6()
	}
	out := st.b[:st.k+1]
	if ascii {
		bs := make([]byte, len(out))
		for i, c := range out {
			bs[i] = byte(c)
		}
		return string(bs)
	}
	return string(utf16.Decode(out))
}

// porter is the stemmer's state: the word b[0..k], and j, the end of the
// stem before a suffix matched by ends.
type porter struct {
	b    []uint16
	j, k int
}

func (p *porter) cons(i int) bool {
	switch p.b[i] {
	case 'a', 'e', 'i', 'o', 'u':
		return false
	case 'y':
		return i == 0 || !p.cons(i-1)
	}
	return true
}

// m counts the VC sequences of b[0..j]: [C](VC)^m[V].
func (p *porter) m() int {
	n, i := 0, 0
	for {
		if i > p.j {
			return n
		}
		if !p.cons(i) {
			break
		}
		i++
	}
	i++
	for {
		for {
			if i > p.j {
				return n
			}
			if p.cons(i) {
				break
			}
			i++
		}
		i++
		n++
		for {
			if i > p.j {
				return n
			}
			if !p.cons(i) {
				break
			}
			i++
		}
		i++
	}
}

func (p *porter) vowelInStem() bool {
	for i := 0; i <= p.j; i++ {
		if !p.cons(i) {
			return true
		}
	}
	return false
}

func (p *porter) doublec(j int) bool {
	return j >= 1 && p.b[j] == p.b[j-1] && p.cons(j)
}

// cvc: b[i-2..i] is consonant, vowel, consonant and b[i] is not w, x or y.
func (p *porter) cvc(i int) bool {
	if i < 2 || !p.cons(i) || p.cons(i-1) || !p.cons(i-2) {
		return false
	}
	c := p.b[i]
	return c != 'w' && c != 'x' && c != 'y'
}

func (p *porter) ends(s string) bool {
	o := p.k - len(s) + 1
	if o < 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if p.b[o+i] != uint16(s[i]) {
			return false
		}
	}
	p.j = p.k - len(s)
	return true
}

// setto replaces b[j+1..k] by s.
func (p *porter) setto(s string) {
	o := p.j + 1
	for len(p.b) < o+len(s) {
		p.b = append(p.b, 0)
	}
	for i := 0; i < len(s); i++ {
		p.b[o+i] = uint16(s[i])
	}
	p.k = p.j + len(s)
}

func (p *porter) r(s string) {
	if p.m() > 0 {
		p.setto(s)
	}
}

// step1: plurals and -ed, -ing.
func (p *porter) step1() {
	if p.b[p.k] == 's' {
		switch {
		case p.ends("sses"):
			p.k -= 2
		case p.ends("ies"):
			p.setto("i")
		case p.b[p.k-1] != 's':
			p.k--
		}
	}
	if p.ends("eed") {
		if p.m() > 0 {
			p.k--
		}
	} else if (p.ends("ed") || p.ends("ing")) && p.vowelInStem() {
		p.k = p.j
		switch {
		case p.ends("at"):
			p.setto("ate")
		case p.ends("bl"):
			p.setto("ble")
		case p.ends("iz"):
			p.setto("ize")
		case p.doublec(p.k):
			c := p.b[p.k]
			p.k--
			if c == 'l' || c == 's' || c == 'z' {
				p.k++
			}
		case p.m() == 1 && p.cvc(p.k):
			p.setto("e")
		}
	}
}

// step2: a final y becomes i after a vowel in the stem.
func (p *porter) step2() {
	if p.ends("y") && p.vowelInStem() {
		p.b[p.k] = 'i'
	}
}

// suffixRule replaces the suffix from by to when m() > 0.
type suffixRule struct{ from, to string }

// step3Rules are the double suffixes by their penultimate letter.
var step3Rules = map[uint16][]suffixRule{
	'a': {{"ational", "ate"}, {"tional", "tion"}},
	'c': {{"enci", "ence"}, {"anci", "ance"}},
	'e': {{"izer", "ize"}},
	'l': {{"bli", "ble"}, {"alli", "al"}, {"entli", "ent"}, {"eli", "e"}, {"ousli", "ous"}},
	'o': {{"ization", "ize"}, {"ation", "ate"}, {"ator", "ate"}},
	's': {{"alism", "al"}, {"iveness", "ive"}, {"fulness", "ful"}, {"ousness", "ous"}},
	't': {{"aliti", "al"}, {"iviti", "ive"}, {"biliti", "ble"}},
	'g': {{"logi", "log"}},
}

// step4Rules are -ic-, -full, -ness etc. by their last letter.
var step4Rules = map[uint16][]suffixRule{
	'e': {{"icate", "ic"}, {"ative", ""}, {"alize", "al"}},
	'i': {{"iciti", "ic"}},
	'l': {{"ical", "ic"}, {"ful", ""}},
	's': {{"ness", ""}},
}

// applyFirst applies the first rule whose suffix the word ends with (the
// first match ends the step, whether or not m() > 0 lets it replace).
func (p *porter) applyFirst(rules []suffixRule) {
	for _, r := range rules {
		if p.ends(r.from) {
			p.r(r.to)
			return
		}
	}
}

func (p *porter) step3() {
	if p.k == 0 {
		return
	}
	p.applyFirst(step3Rules[p.b[p.k-1]])
}

func (p *porter) step4() { p.applyFirst(step4Rules[p.b[p.k]]) }

// step5Suffixes are the suffixes removed in context m() > 1, by their
// penultimate letter ("ion" only after s or t).
var step5Suffixes = map[uint16][]string{
	'a': {"al"}, 'c': {"ance", "ence"}, 'e': {"er"}, 'i': {"ic"}, 'l': {"able", "ible"},
	'n': {"ant", "ement", "ment", "ent"}, 'o': {"ion", "ou"}, 's': {"ism"}, 't': {"ate", "iti"},
	'u': {"ous"}, 'v': {"ive"}, 'z': {"ize"},
}

func (p *porter) step5() {
	if p.k == 0 {
		return
	}
	found := false
	for _, suf := range step5Suffixes[p.b[p.k-1]] {
		if !p.ends(suf) {
			continue
		}
		if suf == "ion" && !(p.j >= 0 && (p.b[p.j] == 's' || p.b[p.j] == 't')) {
			continue
		}
		found = true
		break
	}
	if found && p.m() > 1 {
		p.k = p.j
	}
}

// step6: a final e goes when m() > 1 (or m() = 1 without cvc), and a final
// ll becomes l when m() > 1.
func (p *porter) step6() {
	p.j = p.k
	if p.b[p.k] == 'e' {
		a := p.m()
		if a > 1 || a == 1 && !p.cvc(p.k-1) {
			p.k--
		}
	}
	if p.b[p.k] == 'l' && p.doublec(p.k) && p.m() > 1 {
		p.k--
	}
}

// --- Lucene's BM25 with one-byte norms ---

// Lucene's SmallFloat "int4" encoding: 3 mantissa bits and an exponent, the
// first 24 byte values kept exact (NUM_FREE_VALUES = 255 −
// longToInt4(MaxInt32) = 24).
const numFreeValues = 24

func longToInt4(i int64) int {
	numBits := 64 - bits.LeadingZeros64(uint64(i))
	if numBits < 4 {
		return int(i) // subnormal
	}
	shift := numBits - 4
	encoded := int(uint64(i)>>uint(shift)) & 0x07
	return encoded | (shift+1)<<3
}

func int4ToLong(i int) int64 {
	b := int64(i & 0x07)
	shift := i>>3 - 1
	if shift == -1 {
		return b
	}
	return (b | 0x08) << uint(shift)
}

// intToByte4 is SmallFloat.intToByte4: the norm byte Lucene stores for a
// document of n terms. Lengths up to 39 survive exactly; above, n − 24 keeps
// its 4 leading bits (rounded down): 40 and 41 → 40, 100 → 96, 1000 → 984.
func intToByte4(n int) uint8 {
	if n < numFreeValues {
		return uint8(n)
	}
	return uint8(numFreeValues + longToInt4(int64(n-numFreeValues)))
}

// byte4ToInt is SmallFloat.byte4ToInt: the document length BM25 uses.
func byte4ToInt(b uint8) int {
	if int(b) < numFreeValues {
		return int(b)
	}
	return numFreeValues + int(int4ToLong(int(b)-numFreeValues))
}

// bm25 holds the collection statistics of Lucene 8.3's BM25Similarity,
// in float32 as Lucene computes them.
type bm25 struct {
	k1, b    float32
	docCount int64
	avgdl    float32
	cache    [256]float32 // k1·((1 − b) + b·dl/avgdl) per norm byte
}

func newBM25(k1, b float32, docCount, sumTotalTermFreq int64) *bm25 {
	s := &bm25{k1: k1, b: b, docCount: docCount}
	if docCount > 0 {
		s.avgdl = float32(float64(sumTotalTermFreq) / float64(docCount))
	}
	for i := range s.cache {
		dl := float32(byte4ToInt(uint8(i)))
		// Java evaluates k1 * ((1 - b) + b * dl / avgdl) left to right in
		// float; each conversion below rounds as one Java float operation.
		x := float32(b * dl)
		x = float32(x / s.avgdl)
		x = float32(float32(1-b) + x)
		s.cache[i] = float32(k1 * x)
	}
	return s
}

// idf is log(1 + (N − df + 0.5)/(df + 0.5)) in double, then float.
func (s *bm25) idf(df int64) float32 {
	return float32(math.Log(1 + (float64(s.docCount-df)+0.5)/(float64(df)+0.5)))
}

// termScore is Lucene 8.3's BM25Scorer.score: weight · (float)(freq /
// (freq + norm)), the fraction in double, weight = boost·idf in float.
func (s *bm25) termScore(weight, freq float32, norm uint8) float32 {
	tf := float32(float64(freq) / (float64(freq) + float64(s.cache[norm])))
	return float32(weight * tf)
}
