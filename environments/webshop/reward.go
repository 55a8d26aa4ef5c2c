package webshop

import (
	"strings"
	"sync"
	"unicode"

	"github.com/jdkato/prose/v2"
)

// The reward of a purchase, re-expressed from the original's goal.py.

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

// tokenSetRatio is the original's fuzz.token_set_ratio (thefuzz 0.19.0
// with difflib, see fuzz.go).
func tokenSetRatio(a, b string) int { return tokenSetRatio019(a, b, ratioDifflib) }

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

// RewardRule selects how options are scored.
type RewardRule int

const (
	// RewardOriginal is the original's current goal.py, bug for bug (the
	// default, so that scores compare with published WebShop numbers).
	RewardOriginal RewardRule = iota
	// RewardFixed corrects the original's colour asymmetry: a synthetic
	// goal option is compared by its value, colour-normalised like the
	// bought value, instead of as the text of a (name, value) tuple.
	RewardFixed
)

// goalOptionTexts are the goal options as get_option_reward sees them after
// normalize_color, for the given rule.
//
// Human goals usually carry a list of option strings: each is
// colour-normalised (the first base colour it contains). Synthetic goals
// (and human ones whose options are an object) carry a dict, which
// get_reward passes as goal_options.items(): (name, value) tuples. For a
// tuple, normalize_color's `norm_color in t` is tuple membership, true only
// when the name or the value equals a base colour exactly; otherwise the
// tuple stays a tuple and thefuzz turns it into its str(),
// "('color', 'grey wash')", whose processed tokens are color, grey, wash.
// So a synthetic "grey wash" goal is compared with the bought value
// normalised to "ash" ("grey wash" contains "ash", earlier in the list than
// "grey") and never matches: the asymmetry RewardFixed corrects.
func goalOptionTexts(g *Goal, rule RewardRule) []string {
	out := make([]string, len(g.Options))
	for i, v := range g.Options {
		switch {
		case len(g.OptionNames) != len(g.Options) || rule == RewardFixed:
			out[i] = normalizeColor(v)
		default:
			name := g.OptionNames[i]
			out[i] = pyTupleStr(name, v)
			for _, c := range colorSet {
				if c == name || c == v {
					out[i] = c
					break
				}
			}
		}
	}
	return out
}

// optionMatches is get_option_reward's count: for each goal option, 1 when
// some chosen option value (colour-normalised) has a token-set ratio > 85
// with it. Every option, sizes included, is matched fuzzily, and nothing
// is credited from the product's text, so the count never exceeds the
// number of goal options.
func optionMatches(g *Goal, chosen map[string]string, rule RewardRule) int {
	bought := make([]string, 0, len(chosen))
	for _, v := range chosen {
		bought = append(bought, normalizeColor(v))
	}
	n := 0
	for _, gopt := range goalOptionTexts(g, rule) {
		for _, b := range bought {
			if tokenSetRatio(b, gopt) > 85 {
				n++
				break
			}
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
// value) against goal g with the original's rule (RewardOriginal).
func Reward(p *Product, g *Goal, price float64, chosen map[string]string) RewardInfo {
	return RewardWith(p, g, price, chosen, RewardOriginal)
}

// RewardWith is get_reward: (attribute + option + price matches) /
// (goal attributes + goal options + 1), times the type factor. Each count is
// at most its denominator term, so the reward is in [0, 1].
func RewardWith(p *Product, g *Goal, price float64, chosen map[string]string, rule RewardRule) RewardInfo {
	ri := RewardInfo{
		Type:           typeReward(p, g),
		AttrMatches:    attributeMatches(p, g),
		OptionMatches:  optionMatches(g, chosen, rule),
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
