package webshop

import (
	"strings"
	"sync"

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

// tokenSetRatio is thefuzz's token_set_ratio (0–100).
func tokenSetRatio(a, b string) int { return fuzzy.TokenSetRatio(a, b, true, true) }

var (
	taggerOnce  sync.Once
	taggerModel *prose.Model
	nounCache   sync.Map // string → []string
)

// nouns lists the lower-cased tokens of s that the part-of-speech tagger
// marks as nouns or proper nouns (Penn tags NN, NNS, NNP, NNPS), the
// stand-in for spaCy's NOUN/PROPN of the original.
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
			if strings.HasPrefix(t.Tag, "NN") {
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
	tr := TypeReward{QueryMatch: p.Query == g.Query}
	pc, gc := categorySet(p.ProductCategory), categorySet(g.ProductCategory)
	shared := 0
	for c := range gc {
		if pc[c] {
			shared++
		}
	}
	tr.CategoryMatch = shared >= 2
	bought := map[string]bool{}
	for _, n := range nouns(p.Title) {
		bought[n] = true
	}
	wanted := map[string]bool{}
	for _, n := range nouns(g.Name) {
		wanted[n] = true
	}
	inter := 0
	for n := range wanted {
		if bought[n] {
			inter++
		}
	}
	// The original divides the size of the intersection of the two noun sets
	// by the length of the (possibly repeating) noun list of the goal.
	if wantedList := nouns(g.Name); len(wantedList) == 0 {
		tr.TitleScore = 0.2
	} else {
		tr.TitleScore = float64(inter) / float64(len(wantedList))
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
