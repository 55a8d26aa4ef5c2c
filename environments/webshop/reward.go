package webshop

import (
	"strings"
	"sync"
	"unicode"

	"github.com/jdkato/prose/v2"
	fuzzy "github.com/paul-mannino/go-fuzzywuzzy"
)

// The reward of a purchase, re-expressed from the original's goal.py.

// exactMatchOptions are option names compared exactly (not fuzzily).
var exactMatchOptions = map[string]bool{"size": true}

// colorSet is the original's list of base colours: an option value that
// contains one of them is reduced to the first one found.
var colorSet = []string{
	"alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
	"banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
	"brown", "burgundy", "camel", "camo", "caramel", "champagne",
	"charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
	"cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
	"denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
	"grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
	"ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
	"lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
	"multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
	"orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
	"rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
	"slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
	"tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
}

// normalizeColor returns the first base colour contained in s, or s.
func normalizeColor(s string) string {
	for _, c := range colorSet {
		if strings.Contains(s, c) {
			return c
		}
	}
	return s
}

// fullProcess is thefuzz's full_process(s, force_ascii=True): the code
// points U+0080–U+00FF are deleted (ascii_only), then rapidfuzz's
// default_process turns every character that is not a letter or a number
// into a blank, lower-cases and trims. Code points above U+00FF are kept
// (a letter) or blanked (anything else): "women’s" gives "women s", where
// go-fuzzywuzzy's own cleaning would delete the apostrophe ("womens").
func fullProcess(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r >= 0x80 && r <= 0xff:
		case unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteByte(' ')
		}
	}
	return strings.TrimSpace(b.String())
}

// tokenSetRatio is thefuzz's token_set_ratio (0–100) with its default
// processing: go-fuzzywuzzy's TokenSetRatio (the same sorted intersection /
// remainder comparison with the indel ratio as rapidfuzz) on fullProcess'ed
// strings, 0 when either is empty.
func tokenSetRatio(a, b string) int {
	return fuzzy.TokenSetRatio(fullProcess(a), fullProcess(b), false, false)
}

// nounsOf is the tagger typeReward uses (tests swap in a hand-made one).
var nounsOf = nouns

var (
	taggerOnce  sync.Once
	taggerModel *prose.Model
	nounCache   sync.Map // string → []string
)

// nouns lists the lower-cased tokens of s that the part-of-speech tagger
// marks as nouns or proper nouns (Penn tags NN, NNS, NNP, NNPS) and that
// hold a letter, the stand-in for spaCy's NOUN/PROPN of the original.
func nouns(s string) []string {
	if v, ok := nounCache.Load(s); ok {
		return v.([]string)
	}
	taggerOnce.Do(func() { taggerModel = prose.ModelFromData("webshop-pos") })
	var out []string
	doc, err := prose.NewDocument(s, prose.UsingModel(taggerModel),
		prose.WithSegmentation(false), prose.WithExtraction(false))
	if err == nil {
		for _, t := range doc.Tokens() {
			// prose tags numbers in title-case text ("0.5 Ounce") as nouns
			// where spaCy says NUM: a token needs a letter to count.
			if strings.HasPrefix(t.Tag, "NN") && strings.IndexFunc(t.Text, unicode.IsLetter) >= 0 {
				out = append(out, strings.ToLower(t.Text))
			}
		}
	}
	nounCache.Store(s, out)
	return out
}

// TypeReward is the product-type factor of the reward and its parts.
type TypeReward struct {
	RType         float64
	QueryMatch    bool
	CategoryMatch bool
	TitleScore    float64
}

func categorySet(path string) map[string]bool {
	out := map[string]bool{}
	for _, c := range strings.Split(path, "›") {
		out[strings.TrimSpace(c)] = true
	}
	return out
}

func typeReward(p *Product, g *Goal) TypeReward {
	pc, gc := categorySet(p.ProductCategory), categorySet(g.ProductCategory)
	shared := 0
	for c := range gc {
		if pc[c] {
			shared++
		}
	}
	return typeRewardFrom(p.Query == g.Query, shared >= 2, nounsOf(p.Title), nounsOf(g.Name))
}

// typeRewardFrom is get_type_reward once the query and category matches and
// the two noun lists are known: title score = |set(bought) ∩ set(wanted)| /
// len(wanted) (the goal's list, repeats included), 0.2 without goal nouns;
// r_type 1, 0.5 when nothing matches (query, category, title score > 0.2),
// 0.1 when the title score is below 0.1, 0 when it is 0.
func typeRewardFrom(queryMatch, categoryMatch bool, bought, wanted []string) TypeReward {
	tr := TypeReward{QueryMatch: queryMatch, CategoryMatch: categoryMatch}
	have := make(map[string]bool, len(bought))
	for _, n := range bought {
		have[n] = true
	}
	shared := map[string]bool{}
	for _, n := range wanted {
		if have[n] {
			shared[n] = true
		}
	}
	if len(wanted) == 0 {
		tr.TitleScore = 0.2
	} else {
		tr.TitleScore = float64(len(shared)) / float64(len(wanted))
	}
	tr.RType = 1
	if !(tr.QueryMatch || tr.CategoryMatch || tr.TitleScore > 0.2) {
		tr.RType = 0.5
	}
	if tr.TitleScore < 0.1 {
		tr.RType = 0.1
	}
	if tr.TitleScore == 0 {
		tr.RType = 0
	}
	return tr
}

// inProductText reports whether s occurs in the lower-cased title, bullet
// points or description.
func inProductText(p *Product, s string) bool {
	return strings.Contains(p.titleLower, s) || strings.Contains(p.bulletsLower, s) || strings.Contains(p.descLower, s)
}

func attributeMatches(p *Product, g *Goal) int {
	n := 0
	for _, ga := range g.Attributes {
		matched := false
		for _, pa := range p.Attributes {
			if tokenSetRatio(pa, ga) > 85 {
				matched = true
				break
			}
		}
		if !matched && inProductText(p, ga) {
			matched = true
		}
		if matched {
			n++
		}
	}
	return n
}

// optionMatches counts the chosen options (name → value) that match a goal
// option, with the original's colour normalisation, exact matching of sizes
// and fall-back to the product's text.
func optionMatches(p *Product, goalOptions []string, chosen map[string]string) int {
	goals := make([]string, len(goalOptions))
	for i, o := range goalOptions {
		goals[i] = normalizeColor(o)
	}
	n := 0
	for k, v := range chosen {
		v = normalizeColor(v)
		matched := false
		if exactMatchOptions[strings.ToLower(k)] {
			for _, g := range goals {
				if g == v {
					matched = true
					break
				}
			}
		} else {
			for _, g := range goals {
				if tokenSetRatio(g, v) > 85 {
					matched = true
					break
				}
			}
		}
		if matched || inProductText(p, v) {
			n++
		}
	}
	return n
}

// RewardInfo breaks a reward down.
type RewardInfo struct {
	Reward         float64
	Type           TypeReward
	AttrMatches    int
	OptionMatches  int
	PriceOK        bool
	NumAttributes  int
	NumGoalOptions int
}

// Reward scores buying product p at price with the chosen options (name →
// value) against goal g: (attribute + option + price matches) /
// (attributes + goal options + 1), times the type factor.
func Reward(p *Product, g *Goal, price float64, chosen map[string]string) RewardInfo {
	ri := RewardInfo{
		Type:           typeReward(p, g),
		AttrMatches:    attributeMatches(p, g),
		OptionMatches:  optionMatches(p, g.Options, chosen),
		PriceOK:        g.PriceUpper > 0 && price <= g.PriceUpper,
		NumAttributes:  len(g.Attributes),
		NumGoalOptions: len(g.Options),
	}
	num := float64(ri.AttrMatches + ri.OptionMatches)
	if ri.PriceOK {
		num++
	}
	ri.Reward = num / float64(ri.NumAttributes+ri.NumGoalOptions+1) * ri.Type.RType
	return ri
}
