package webshop

import (
	"math"
	"strings"
	"testing"
)

func handProduct() *Product {
	p := &Product{
		ASIN:            "B0TEST0001",
		Title:           "Acme Leather Office Chair with Lumbar Support",
		Description:     "An ergonomic chair that is easy to assemble.",
		BulletPoints:    []string{"Height adjustable seat", "PU leather"},
		Query:           "office chair",
		ProductCategory: "Home & Kitchen › Furniture › Home Office Furniture › Chairs",
		Attributes:      []string{"lumbar support", "high back"},
		Options:         []OptionGroup{{"color", []string{"black forest", "navy blue"}}, {"size", []string{"large", "x-large"}}},
	}
	p.titleLower = strings.ToLower(p.Title)
	p.bulletsLower = strings.ToLower(strings.Join(p.BulletPoints, " "))
	p.descLower = strings.ToLower(p.Description)
	return p
}

func handGoal(p *Product) *Goal {
	return &Goal{
		ASIN: p.ASIN, Query: p.Query, Name: p.Title, ProductCategory: p.ProductCategory,
		Attributes: []string{"lumbar support", "height adjustable", "easy assemble"},
		Options:    []string{"black", "large"},
		PriceUpper: 50,
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestRewardHandMade(t *testing.T) {
	p := handProduct()
	g := handGoal(p)
	cases := []struct {
		name    string
		price   float64
		chosen  map[string]string
		want    float64
		attrs   int
		options int
	}{
		// "lumbar support" is an attribute; "height adjustable" is in a bullet
		// point; "easy assemble" is neither (the text says "easy to assemble").
		// "black forest" normalises to "black".
		{"all options right", 40, map[string]string{"color": "black forest", "size": "large"}, 5.0 / 6, 2, 2},
		{"price above the bound", 60, map[string]string{"color": "black forest", "size": "large"}, 4.0 / 6, 2, 2},
		{"price equal to the bound", 50, map[string]string{"color": "black forest", "size": "large"}, 5.0 / 6, 2, 2},
		// Sizes match fuzzily like any option: {x, large} vs {large} share all
		// of "large", token-set ratio 100.
		{"x-large for large", 40, map[string]string{"color": "black forest", "size": "x-large"}, 5.0 / 6, 2, 2},
		// "navy blue" normalises to "blue" (first colour of the list found), not "black".
		{"wrong colour", 40, map[string]string{"color": "navy blue", "size": "large"}, 4.0 / 6, 2, 1},
		{"no options chosen", 40, map[string]string{}, 3.0 / 6, 2, 0},
		// An option found in the product's text ("leather") earns nothing
		// when no goal option matches it (no text fallback).
		{"option in the text", 40, map[string]string{"color": "leather", "size": "large"}, 4.0 / 6, 2, 1},
	}
	for _, c := range cases {
		ri := Reward(p, g, c.price, c.chosen)
		if !near(ri.Reward, c.want) || ri.AttrMatches != c.attrs || ri.OptionMatches != c.options || ri.Type.RType != 1 {
			t.Errorf("%s: %+v, want reward %v attrs %d options %d", c.name, ri, c.want, c.attrs, c.options)
		}
	}
	// Everything right: reward 1.
	g.Attributes = []string{"lumbar support", "high back"}
	if ri := Reward(p, g, 10, map[string]string{"color": "black forest", "size": "large"}); !near(ri.Reward, 1) {
		t.Fatalf("perfect purchase: %+v", ri)
	}
	// Token-set ratio > 85 matches attributes regardless of word order and case.
	g.Attributes = []string{"Support Lumbar"}
	if ri := Reward(p, g, 10, nil); ri.AttrMatches != 1 {
		t.Fatalf("token set match: %+v", ri)
	}
	g.Attributes = []string{"gluten free"}
	if ri := Reward(p, g, 10, nil); ri.AttrMatches != 0 || !near(ri.Reward, 1.0/4) {
		t.Fatalf("absent attribute: %+v", ri)
	}
}

func TestTypeReward(t *testing.T) {
	p := handProduct()
	g := handGoal(p)
	// Same product: all nouns shared.
	if tr := typeReward(p, g); tr.RType != 1 || !tr.QueryMatch || !tr.CategoryMatch || tr.TitleScore != 1 {
		t.Fatalf("same product: %+v", tr)
	}
	other := *p
	// A different product type, other query, other category: no noun shared.
	other.Title = "Organic Green Tea"
	other.Query = "green tea"
	other.ProductCategory = "Grocery & Gourmet Food › Beverages › Tea"
	if tr := typeReward(&other, g); tr.RType != 0 || tr.TitleScore != 0 || tr.QueryMatch || tr.CategoryMatch {
		t.Fatalf("other type: %+v", tr)
	}
	if ri := Reward(&other, g, 10, map[string]string{"color": "black forest", "size": "large"}); ri.Reward != 0 {
		t.Fatalf("a product of another type earns %v", ri.Reward)
	}
	// Share one noun of the goal's name out of several, with no query or
	// category match: title score ≤ 0.2 → 0.5 (or 0.1 below 0.1).
	goal := &Goal{Name: "acme office chair desk lamp table", Query: "lamp", ProductCategory: "A › B"}
	n := len(nouns(goal.Name))
	if n < 5 {
		t.Skipf("tagger found only %d nouns in %q", n, goal.Name)
	}
	prod := &Product{Title: "a red lamp", Query: "x", ProductCategory: "C › D"}
	tr := typeReward(prod, goal)
	if !near(tr.TitleScore, 1/float64(n)) {
		t.Fatalf("title score %v, want 1/%d", tr.TitleScore, n)
	}
	want := 0.5
	if tr.TitleScore < 0.1 {
		want = 0.1
	}
	if tr.RType != want {
		t.Fatalf("r_type %v, want %v (%+v)", tr.RType, want, tr)
	}
	// The same weak title match with the query matching: back to 1 (unless
	// the title score is below 0.1, which wins over any match).
	prod.Query = "lamp"
	want = 1
	if tr.TitleScore < 0.1 {
		want = 0.1
	}
	if tr := typeReward(prod, goal); tr.RType != want || !tr.QueryMatch {
		t.Fatalf("query match: %+v, want r_type %v", tr, want)
	}
	// Category match needs two shared levels.
	prod.Query = "x"
	prod.ProductCategory = "A › B › E"
	if tr := typeReward(prod, goal); !tr.CategoryMatch {
		t.Fatalf("category match: %+v", tr)
	}
	prod.ProductCategory = "A › E"
	if tr := typeReward(prod, goal); tr.CategoryMatch {
		t.Fatalf("one shared level is no category match: %+v", tr)
	}
	// No noun at all in the goal's name: title score 0.2.
	if tr := typeReward(prod, &Goal{Name: "very quickly"}); tr.TitleScore != 0.2 {
		t.Fatalf("noun-less goal: %+v", tr)
	}
}

func TestNormalizeColor(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "black forest": "black", "violet lavender": "lavender", "steelivy fuchsia": "fuchsia",
		"123alabaster": "alabaster", "webshop": "webshop",
	} {
		if got := normalizeColor(in); got != want {
			t.Errorf("normalizeColor(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTokenSetRatio(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"high quality", "quality high", 100},
		{"gluten free", "Gluten-Free, non GMO", 100}, // a subset scores 100
		{"navy", "blue", 0},
		{"abc", "abd", 67}, // difflib: block "ab", 2·2/6 = 66.7 → 67
	} {
		if got := tokenSetRatio(c.a, c.b); got != c.want {
			t.Errorf("tokenSetRatio(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
