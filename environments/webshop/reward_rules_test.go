package webshop

import (
	"strings"
	"testing"
)

// The expected values below are worked out by hand from goal.py's rules (and
// thefuzz's token_set_ratio), not read back from this package.

// TestTypeRewardThresholds checks get_type_reward's title score and its
// 1.0 / 0.5 / 0.1 / 0 rules on noun lists given directly (no tagger).
func TestTypeRewardThresholds(t *testing.T) {
	words := func(s string) []string { return strings.Fields(s) }
	cases := []struct {
		name         string
		query, categ bool
		bought       string
		wanted       string
		title        float64
		rType        float64
	}{
		// 1 shared of 3 goal nouns = 0.333 > 0.2: 1 without query or category match.
		{"a third", false, false, "chair", "chair office support", 1.0 / 3, 1},
		// Exactly 0.2 is not > 0.2: 0.5 unless the query or the category matches.
		{"a fifth, no match", false, false, "lamp", "lamp desk table bulb shade", 0.2, 0.5},
		{"a fifth, query", true, false, "lamp", "lamp desk table bulb shade", 0.2, 1},
		{"a fifth, category", false, true, "lamp", "lamp desk table bulb shade", 0.2, 1},
		// Exactly 0.1 is not < 0.1: still 0.5 / 1.
		{"a tenth, no match", false, false, "a", "a b c d e f g h i j", 0.1, 0.5},
		{"a tenth, query", true, false, "a", "a b c d e f g h i j", 0.1, 1},
		// 1/11 < 0.1: 0.1 even when query and category match.
		{"an eleventh", true, true, "a", "a b c d e f g h i j k", 1.0 / 11, 0.1},
		// No shared noun: 0 whatever else matches.
		{"nothing shared", true, true, "tea", "chair", 0, 0},
		// No goal noun: title score 0.2, so 0.5 without a match, 1 with one.
		{"no goal noun", false, false, "chair", "", 0.2, 0.5},
		{"no goal noun, query", true, false, "chair", "", 0.2, 1},
		// The denominator is the goal's noun list with repeats, the numerator
		// the size of the set intersection: 1/4 = 0.25 → 1; 1/6 → 0.5.
		{"repeats 1/4", false, false, "shoe shoe shoe", "shoe shoe rack organizer", 0.25, 1},
		{"repeats 1/6", false, false, "shoe", "shoe shoe shoe shoe shoe rack", 1.0 / 6, 0.5},
		// Two goal nouns of 3 shared.
		{"two of three", false, false, "office chair black", "office chair support", 2.0 / 3, 1},
	}
	for _, c := range cases {
		tr := typeRewardFrom(c.query, c.categ, words(c.bought), words(c.wanted))
		if !near(tr.TitleScore, c.title) || tr.RType != c.rType || tr.QueryMatch != c.query || tr.CategoryMatch != c.categ {
			t.Errorf("%s: %+v, want title score %v, r_type %v", c.name, tr, c.title, c.rType)
		}
	}
}

// withWordNouns makes every lower-cased word of a title a noun for the
// duration of a test, so that type factors can be worked out by hand.
func withWordNouns(t *testing.T) {
	old := nounsOf
	nounsOf = func(s string) []string { return strings.Fields(strings.ToLower(s)) }
	t.Cleanup(func() { nounsOf = old })
}

// TestRewardTotal checks total = (attributes + options + price) /
// (goal attributes + goal options + 1) × r_type, with r_type below 1.
func TestRewardTotal(t *testing.T) {
	withWordNouns(t)
	target := &Product{Title: "oak desk lamp shade bulb", Query: "desk lamp", ProductCategory: "Home › Lighting › Lamps"}
	g := &Goal{Name: target.Title, Query: target.Query, ProductCategory: target.ProductCategory,
		Attributes: []string{"dimmable"}, Options: []string{"white"}, PriceUpper: 40}
	bought := handText(&Product{
		Title:           "white lamp", // shares "lamp": 1 of 5 goal nouns = 0.2
		Description:     "a dimmable light",
		Query:           "floor lamp",               // no query match
		ProductCategory: "Home › Furniture › Lamps", // shares 2 levels: "Home", "Lamps"
		Attributes:      []string{"energy saving"},
	})
	// Category match: r_type 1; attribute in the description, option white
	// equal to the goal's, price 30 ≤ 40: (1 + 1 + 1) / (1 + 1 + 1) = 1.
	if ri := Reward(bought, g, 30, map[string]string{"color": "white"}); !near(ri.Reward, 1) || ri.Type.RType != 1 || !ri.Type.CategoryMatch {
		t.Fatalf("category match: %+v", ri)
	}
	// One shared level only: no match, title score 0.2 → r_type 0.5;
	// price 45 > 40: (1 + 1 + 0) / 3 × 0.5 = 1/3.
	bought.ProductCategory = "Garden › Lamps"
	if ri := Reward(bought, g, 45, map[string]string{"color": "white"}); !near(ri.Reward, 1.0/3) || ri.Type.RType != 0.5 || ri.PriceOK {
		t.Fatalf("r_type 0.5: %+v", ri)
	}
	// A goal without options: denominator attributes + 1. The chosen option
	// counts for nothing (there is no goal option to match, and the
	// original's current get_option_reward has no text fallback), so the
	// total stays at most 1: (1 + 0 + 1) / (1 + 0 + 1) × 0.5 = 0.5 ...
	g.Options = nil
	if ri := Reward(bought, g, 30, map[string]string{"color": "white"}); !near(ri.Reward, 0.5) || ri.OptionMatches != 0 {
		t.Fatalf("no goal options: %+v", ri)
	}
	// ... and 1.0 (not 1.5) with the category match.
	bought.ProductCategory = target.ProductCategory
	if ri := Reward(bought, g, 30, map[string]string{"color": "white"}); ri.Reward != 1 {
		t.Fatalf("reward of a goal without options: %+v", ri)
	}
}

func handText(p *Product) *Product {
	p.titleLower = strings.ToLower(p.Title)
	p.bulletsLower = strings.ToLower(strings.Join(p.BulletPoints, " "))
	p.descLower = strings.ToLower(p.Description)
	return p
}

// TestAttributeRewardRules: token_set_ratio > 85 against the product's
// attributes, else a plain substring of the lower-cased title, bullet
// points or description (the goal attribute itself is not lower-cased).
func TestAttributeRewardRules(t *testing.T) {
	p := handText(&Product{
		Title:        "Ashwood Bench",
		BulletPoints: []string{"Seats two", "Oil finish"},
		Description:  "Easy to assemble, no tools.",
		Attributes:   []string{"machine wash", "long lasting", "abcdefghijklmnopqxyz"},
	})
	for _, c := range []struct {
		attr string
		want bool
	}{
		// {machine, washable} vs {machine, wash}: indel ratio of "washable" and
		// "wash" over the lengths of "machine washable" and "machine wash":
		// 100 × (1 − 4/28) = 85.7 → 86 > 85.
		{"machine washable", true},
		{"lasting long", true},          // same token set: 100
		{"Long Lasting", true},          // the fuzzy match ignores case
		{"abcdefghijklmnopqrsz", true},  // 2 of 20 letters differ: 100 × (1 − 4/40) = 90
		{"abcdefghijklmnopqrst", false}, // 3 differ: 100 × (1 − 6/40) = 85, not > 85
		{"ash", true},                   // substring of the title "ashwood bench"
		{"oil finish", true},            // in a bullet point
		{"seats two oil", true},         // bullet points are joined with a blank
		{"easy to assemble", true},      // in the description
		{"Easy to assemble", false},     // the fallback compares with the lower-cased texts as is
		{"easy assemble", false},        // neither fuzzy (vs the attributes) nor a substring
		{"tools.", true},                // punctuation is part of the substring test
	} {
		g := &Goal{Attributes: []string{c.attr}}
		if got := attributeMatches(p, g) == 1; got != c.want {
			t.Errorf("attribute %q: matched %v, want %v", c.attr, got, c.want)
		}
	}
}

// TestFullProcess pins thefuzz 0.19.0's processing (force_ascii): Latin-1
// code points are deleted, characters that are not word characters of
// Python's re (letters, numbers, '_') become blanks.
func TestFullProcess(t *testing.T) {
	for in, want := range map[string]string{
		"  Gluten-Free!  ": "gluten free",
		"women’s":          "women s", // U+2019 is above U+00FF: a blank
		"crème brûlée":     "crme brle",
		"DUMMY_ATTR":       "dummy_attr", // '_' is a word character of \w
		"10″ x 12″":        "10  x 12",   // blanks are not collapsed
		"---":              "",
	} {
		if got := fullProcess019(in); got != want {
			t.Errorf("fullProcess019(%q) = %q, want %q", in, got, want)
		}
	}
	if got := tokenSetRatio("---", "---"); got != 0 {
		t.Errorf("empty after processing: %d, want 0", got)
	}
	// {gluten, free} vs {free, sugar}: sect "free", "free gluten" (11),
	// "free sugar" (10). ratio("free", "free sugar") = 2·4/14 = 57.1; and
	// difflib on "free gluten" / "free sugar" finds "free " (5), then in
	// "gluten" / "sugar" the earliest single-character block "g": 2·6/21 =
	// 57.1 → 57.
	if got := tokenSetRatio("gluten free", "free sugar"); got != 57 {
		t.Errorf("tokenSetRatio(gluten free, free sugar) = %d, want 57", got)
	}
}

// TestNounsTagger: the stand-in tagger finds the nouns of plain phrases and
// never counts a token without a letter (spaCy tags those NUM).
func TestNounsTagger(t *testing.T) {
	if got := nouns("a red lamp"); len(got) != 1 || got[0] != "lamp" {
		t.Fatalf("nouns(a red lamp) = %v", got)
	}
	got := nouns("COVERGIRL Lipstick Cream, Ruby Red, 0.123 Ounce, Pack of 2")
	has := map[string]bool{}
	for _, n := range got {
		has[n] = true
		if strings.IndexFunc(n, func(r rune) bool { return r >= 'a' && r <= 'z' }) < 0 {
			t.Errorf("token %q without a letter counted as a noun (%v)", n, got)
		}
	}
	if !has["lipstick"] || !has["ounce"] {
		t.Errorf("nouns = %v, want lipstick and ounce among them", got)
	}
}

// TestGoalWithoutOptions plays a goal whose product has no options: one goal
// (itertools.product of nothing is one empty combination), no option clause
// in the instruction, reward (attributes + price) / (attributes + 1), and no
// r_option in the purchase info (the original's get_option_reward gives None).
func TestGoalWithoutOptions(t *testing.T) {
	dir := t.TempDir()
	writeJSON(t, dir+"/items_shuffle_x.json", []any{map[string]any{
		"asin": "B0NOOPT001", "name": "Plain Steel Water Bottle", "full_description": "Keeps drinks cold.",
		"small_description": []string{"BPA free"}, "pricing": "$15.00", "customization_options": nil,
		"product_category": "Sports › Water Bottles", "query": "water bottle", "category": "sports",
	}})
	writeJSON(t, dir+"/items_ins_v2_x.json", map[string]any{"B0NOOPT001": map[string]any{
		"attributes": []string{"bpa free"}, "instruction": "Find me bpa free, dishwasher safe water bottle",
		"instruction_attributes": []string{"bpa free", "dishwasher safe"}}})
	e, err := New(envOpts(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(e.goals) != 1 || len(e.goals[0].Options) != 0 || !strings.HasPrefix(e.goals[0].Instruction, "Find me bpa free, dishwasher safe water bottle, and price lower than ") {
		t.Fatalf("goals %+v", e.goals)
	}
	if _, err := e.Reset(bg, "webshop", 0, 0); err != nil {
		t.Fatal(err)
	}
	r := mustStep(t, e, "search[water bottle]")
	for _, a := range []string{"click[b0noopt001]", "click[buy now]"} {
		r = mustStep(t, e, a)
	}
	// "bpa free" matches, "dishwasher safe" does not; the price is under any
	// bound: (1 + 0 + 1) / (2 + 0 + 1) = 2/3.
	if !r.Done || !near(r.Info["raw_reward"].(float64), 2.0/3) || r.Info["r_att"] != 0.5 || r.Info["r_price"] != true {
		t.Fatalf("purchase: %+v", r)
	}
	if _, ok := r.Info["r_option"]; ok {
		t.Fatalf("r_option reported for a goal without options: %v", r.Info)
	}
}
