package webshop

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	fuzzy "github.com/paul-mannino/go-fuzzywuzzy"
)

// Fuzzy string matching as the original computes it. WebShop's
// requirements.txt pins thefuzz==0.19.0 (the fuzzywuzzy code base, before
// thefuzz moved to rapidfuzz) and does not install python-Levenshtein, so
// thefuzz falls back to difflib's SequenceMatcher for its ratio. That is what
// this file re-expresses:
//
//	token_set_ratio(s1, s2) = max(ratio(sect, sect+rest1), ratio(sect, sect+rest2),
//	                              ratio(sect+rest1, sect+rest2))
//	ratio(a, b)             = round_half_even(100 · 2·M / (len(a)+len(b)))
//
// where M is the number of characters in difflib's matching blocks (longest
// common substring first, then recursively left and right of it) — not the
// longest common subsequence that python-Levenshtein's ratio (and
// go-fuzzywuzzy's Ratio) uses. The two differ when a long common substring
// hides a longer chain of short matches: for "xyzw.a.b.c.d.e.f" and
// "a,b,c,d,e,fxyzw" difflib finds only "xyzw" (2·4/31 → 26), Levenshtein
// the chain a…f (2·6/31 → 39).

// fuzzRatioKind selects the ratio behind tokenSetRatio.
type fuzzRatioKind int

const (
	// ratioDifflib is thefuzz 0.19.0 without python-Levenshtein (the
	// original's pinned environment): difflib.SequenceMatcher.
	ratioDifflib fuzzRatioKind = iota
	// ratioLevenshtein is thefuzz 0.19.0 with python-Levenshtein installed
	// (go-fuzzywuzzy's Ratio, an indel distance ratio).
	ratioLevenshtein
)

// fullProcess019 is thefuzz 0.19.0's utils.full_process(s, force_ascii=True):
// the code points U+0080–U+00FF are deleted (asciidammit), every character
// that is not a word character of Python's re (letters, numbers and '_') is
// replaced by a blank, then the string is lower-cased and trimmed.
func fullProcess019(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r >= 0x80 && r <= 0xff:
		case r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteByte(' ')
		}
	}
	return strings.TrimSpace(b.String())
}

// seqMatches is the total size of difflib.SequenceMatcher(None, a,
// b).get_matching_blocks() (isjunk None, autojunk on: an element of b that
// occurs more than len(b)/100 + 1 times in a b of 200 or more elements is
// "popular" and never starts a match, though a match may be extended over
// it).
func seqMatches(a, b []rune) int {
	b2j := map[rune][]int{}
	for j, r := range b {
		b2j[r] = append(b2j[r], j)
	}
	if n := len(b); n >= 200 {
		ntest := n/100 + 1
		for r, idx := range b2j {
			if len(idx) > ntest {
				delete(b2j, r)
			}
		}
	}
	// find_longest_match(alo, ahi, blo, bhi): the longest block, earliest in
	// a, then earliest in b; extended over equal (popular) neighbours.
	longest := func(alo, ahi, blo, bhi int) (int, int, int) {
		besti, bestj, bestsize := alo, blo, 0
		j2len := map[int]int{}
		for i := alo; i < ahi; i++ {
			next := map[int]int{}
			for _, j := range b2j[a[i]] {
				if j < blo {
					continue
				}
				if j >= bhi {
					break
				}
				k := j2len[j-1] + 1
				next[j] = k
				if k > bestsize {
					besti, bestj, bestsize = i-k+1, j-k+1, k
				}
			}
			j2len = next
		}
		for besti > alo && bestj > blo && a[besti-1] == b[bestj-1] {
			besti, bestj, bestsize = besti-1, bestj-1, bestsize+1
		}
		for besti+bestsize < ahi && bestj+bestsize < bhi && a[besti+bestsize] == b[bestj+bestsize] {
			bestsize++
		}
		return besti, bestj, bestsize
	}
	total := 0
	type span struct{ alo, ahi, blo, bhi int }
	queue := []span{{0, len(a), 0, len(b)}}
	for len(queue) > 0 {
		s := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		i, j, k := longest(s.alo, s.ahi, s.blo, s.bhi)
		if k == 0 {
			continue
		}
		total += k
		if s.alo < i && s.blo < j {
			queue = append(queue, span{s.alo, i, s.blo, j})
		}
		if i+k < s.ahi && j+k < s.bhi {
			queue = append(queue, span{i + k, s.ahi, j + k, s.bhi})
		}
	}
	return total
}

// seqRatio is thefuzz 0.19.0's fuzz.ratio with difflib: 100 for equal
// strings, 0 when one is empty, else round(100 · 2M/T) with Python's
// round-half-to-even.
func seqRatio(a, b string) int {
	if a == b {
		return 100
	}
	if a == "" || b == "" {
		return 0
	}
	ra, rb := []rune(a), []rune(b)
	m := seqMatches(ra, rb)
	r := 2.0 * float64(m) / float64(len(ra)+len(rb))
	return int(math.RoundToEven(100 * r))
}

// levRatio is the same with python-Levenshtein's ratio: (T − d)/T with d
// the edit distance where a substitution costs 2 (go-fuzzywuzzy's
// LevEditDistance with xcost 1), rounded half to even as Python does
// (go-fuzzywuzzy's own Ratio rounds half up: 12.5 → 13 where Python says 12).
func levRatio(a, b string) int {
	if a == b {
		return 100
	}
	if a == "" || b == "" {
		return 0
	}
	t := utf8.RuneCountInString(a) + utf8.RuneCountInString(b)
	d := fuzzy.LevEditDistance(a, b, 1)
	return int(math.RoundToEven(100 * (float64(t-d) / float64(t))))
}

// tokenSetRatio019 is thefuzz 0.19.0's fuzz.token_set_ratio(s1, s2) with
// its defaults (force_ascii, full_process) and the given ratio.
func tokenSetRatio019(s1, s2 string, kind fuzzRatioKind) int {
	p1, p2 := fullProcess019(s1), fullProcess019(s2)
	if p1 == "" || p2 == "" {
		return 0
	}
	t1, t2 := tokenSet(p1), tokenSet(p2)
	var sect, d1, d2 []string
	for t := range t1 {
		if t2[t] {
			sect = append(sect, t)
		} else {
			d1 = append(d1, t)
		}
	}
	for t := range t2 {
		if !t1[t] {
			d2 = append(d2, t)
		}
	}
	sort.Strings(sect)
	sort.Strings(d1)
	sort.Strings(d2)
	ss := strings.Join(sect, " ")
	c12 := strings.TrimSpace(ss + " " + strings.Join(d1, " "))
	c21 := strings.TrimSpace(ss + " " + strings.Join(d2, " "))
	ratio := seqRatio
	if kind == ratioLevenshtein {
		ratio = levRatio
	}
	return max(ratio(ss, c12), ratio(ss, c21), ratio(c12, c21))
}

func tokenSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, t := range strings.Fields(s) {
		out[t] = true
	}
	return out
}

// pyRepr is Python 3's repr() of a str: single quotes unless the string
// holds a single quote and no double quote; backslash, the quote, \t, \n, \r
// escaped; other non-printable characters (Python's str.isprintable: not in
// the categories C* or Z*, or the ASCII space) as \xhh, \uhhhh or
// \Uhhhhhhhh.
func pyRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\\' || r == rune(quote):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x` + hex(int(r), 2))
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			b.WriteString(`\x` + hex(int(r), 2))
		case r <= 0xffff:
			b.WriteString(`\u` + hex(int(r), 4))
		default:
			b.WriteString(`\U` + hex(int(r), 8))
		}
	}
	b.WriteByte(quote)
	return b.String()
}

func hex(v, width int) string {
	s := strconv.FormatInt(int64(v), 16)
	return strings.Repeat("0", max(0, width-len(s))) + s
}

// pyTupleStr is str((name, value)) for two Python strings: what thefuzz
// 0.19.0's asciidammit makes of a (name, value) tuple before processing it.
func pyTupleStr(name, value string) string {
	return "(" + pyRepr(name) + ", " + pyRepr(value) + ")"
}
