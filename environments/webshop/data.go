package webshop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Sentinel errors of this package (wrapped with %w).
var (
	ErrNoData      = errors.New("webshop: data files not found")
	ErrBadData     = errors.New("webshop: malformed data file")
	ErrNoGoals     = errors.New("webshop: no goals in the catalogue")
	ErrUnknownASIN = errors.New("webshop: unknown product")
	ErrBadOption   = errors.New("webshop: bad option")
)

// OptionGroup is one customization of a product ("color": ["black", "navy"]),
// in the order of the data file. Names and values are lower-cased and "/"
// becomes " | ", as in the original.
type OptionGroup struct {
	Name   string
	Values []string
}

// Review is one customer review shown on the Reviews sub-page.
type Review struct {
	Title string
	Score string
	Body  string
}

// HumanInstruction is one instruction written by a crowd worker for a product
// (items_human_ins.json).
type HumanInstruction struct {
	Instruction string
	Attributes  []string
	Options     []string
	OptionNames []string // set when instruction_options is a {name: value} object
}

// Product is one catalogue entry after the original's load_products clean-up.
type Product struct {
	ASIN            string
	Title           string
	Description     string
	BulletPoints    []string
	Pricing         []float64 // one price, or a [low, high] range
	PriceTag        string    // "$12.99" or "$10.0 to $20.0"
	Category        string
	Query           string // lower-cased, trimmed
	ProductCategory string // " › "-joined path
	Options         []OptionGroup
	Attributes      []string // ["DUMMY_ATTR"] when the attributes file has none
	Rating          string
	Reviews         []Review

	// Synthetic-goal source (items_ins_v2): empty Instruction means none.
	Instruction           string
	InstructionAttributes []string
	// Human goals (items_human_ins.json).
	HumanInstructions []HumanInstruction

	titleLower, bulletsLower, descLower string
}

// optionGroupOf returns the group that holds value, the last one when several do
// (as the original's clickable map, where a later radio button wins).
func (p *Product) optionGroupOf(value string) (string, bool) {
	name, ok := "", false
	for _, g := range p.Options {
		for _, v := range g.Values {
			if v == value {
				name, ok = g.Name, true
			}
		}
	}
	return name, ok
}

// Goal is one instruction with what the reward checks.
type Goal struct {
	ASIN            string
	Category        string
	Query           string
	Name            string // the target product's title
	ProductCategory string
	Instruction     string
	Attributes      []string
	PriceUpper      float64
	Options         []string          // goal option values
	OptionsByName   map[string]string // synthetic goals: option name → value; nil for human goals
	OptionNames     []string          // the name of each of Options when the goal's options are a dict (synthetic goals; human ones given as an object), else nil
	Human           bool
}

// rawProduct is one element of items_shuffle*.json, decoded leniently.
type rawProduct struct {
	ASIN                 json.RawMessage `json:"asin"`
	Name                 *string         `json:"name"`
	FullDescription      *string         `json:"full_description"`
	SmallDescription     json.RawMessage `json:"small_description"`
	Pricing              json.RawMessage `json:"pricing"`
	CustomizationOptions json.RawMessage `json:"customization_options"`
	ProductCategory      *string         `json:"product_category"`
	Query                *string         `json:"query"`
	Category             *string         `json:"category"`
	AverageRating        json.RawMessage `json:"average_rating"`
}

type rawAttr struct {
	Attributes            []string `json:"attributes"`
	Instruction           *string  `json:"instruction"`
	InstructionAttributes []string `json:"instruction_attributes"`
}

type rawHuman struct {
	Instruction           string          `json:"instruction"`
	InstructionAttributes []string        `json:"instruction_attributes"`
	InstructionOptions    json.RawMessage `json:"instruction_options"`
}

type rawReviewEntry struct {
	ASIN          string          `json:"asin"`
	Reviews       []rawReview     `json:"reviews"`
	AverageRating json.RawMessage `json:"average_rating"`
}

type rawReview struct {
	Title  string          `json:"title"`
	Score  json.RawMessage `json:"score"`
	Stars  json.RawMessage `json:"stars"`
	Body   string          `json:"body"`
	Review string          `json:"review"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// jsonScalarText renders a JSON scalar as Python's str() would roughly do
// (numbers as written, strings unquoted); null and absent give def.
func jsonScalarText(raw json.RawMessage, def string) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return def
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

var nonPriceChars = regexp.MustCompile(`[^\d.]`)

// parsePricing follows the original: split on '$', strip everything but
// digits and dots; none → $100.0.
func parsePricing(raw json.RawMessage) ([]float64, string) {
	var s string
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && string(raw) != "null" {
		if json.Unmarshal(raw, &s) != nil {
			var list []string
			if json.Unmarshal(raw, &list) == nil {
				s = strings.Join(list, " ")
			}
		}
	}
	var out []float64
	if s != "" {
		parts := strings.Split(s, "$")
		for _, part := range parts[1:] {
			clean := nonPriceChars.ReplaceAllString(part, "")
			if f, err := strconv.ParseFloat(clean, 64); err == nil {
				out = append(out, f)
			}
		}
	}
	switch {
	case len(out) == 0:
		return []float64{100}, "$100.0"
	case len(out) == 1:
		return out, "$" + pyFloat(out[0])
	default:
		out = out[:2]
		return out, "$" + pyFloat(out[0]) + " to $" + pyFloat(out[1])
	}
}

// pyFloat formats a float as Python's str(float) does for ordinary prices.
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// orderedOptions decodes customization_options ({name: [{value, image}]})
// keeping the key order of the file.
func orderedOptions(raw json.RawMessage) ([]OptionGroup, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if d == '[' { // an empty list stands for "no options" in some dumps
			return nil, nil
		}
		return nil, fmt.Errorf("customization_options is not an object")
	}
	var groups []OptionGroup
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := kt.(string)
		var contents []struct {
			Value any `json:"value"`
		}
		var rawContents json.RawMessage
		if err := dec.Decode(&rawContents); err != nil {
			return nil, err
		}
		if string(bytes.TrimSpace(rawContents)) == "null" {
			continue
		}
		if err := json.Unmarshal(rawContents, &contents); err != nil {
			return nil, fmt.Errorf("option %q: %v", name, err)
		}
		g := OptionGroup{Name: strings.ToLower(name)}
		for _, c := range contents {
			v := ""
			switch x := c.Value.(type) {
			case string:
				v = x
			case nil:
			default:
				v = fmt.Sprint(x)
			}
			v = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(v), "/", " | "))
			g.Values = append(g.Values, v)
		}
		// A repeated name replaces the earlier group in place (Python dict).
		replaced := false
		for i := range groups {
			if groups[i].Name == g.Name {
				groups[i] = g
				replaced = true
			}
		}
		if !replaced {
			groups = append(groups, g)
		}
	}
	return groups, nil
}

// stringList decodes a JSON string or list of strings.
func stringList(raw json.RawMessage) []string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return list
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var anyList []any
	if json.Unmarshal(raw, &anyList) == nil {
		for _, a := range anyList {
			if a != nil {
				list = append(list, fmt.Sprint(a))
			}
		}
		return list
	}
	return nil
}

// optionValues decodes instruction_options: a list, or a {name: value} map.
func optionValues(raw json.RawMessage) []string {
	v, _ := optionValuesNamed(raw)
	return v
}

// optionValuesNamed is optionValues that also returns the names (sorted)
// when the options are a {name: value} object, nil for a list.
func optionValuesNamed(raw json.RawMessage) (values, names []string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '{' {
		groups := map[string]string{}
		if json.Unmarshal(raw, &groups) == nil {
			keys := make([]string, 0, len(groups))
			for k := range groups {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			out := make([]string, len(keys))
			for i, k := range keys {
				out[i] = groups[k]
			}
			return out, keys
		}
	}
	return stringList(raw), nil
}

// Files names the data files of a catalogue.
type Files struct {
	Products string // items_shuffle*.json (required)
	Attrs    string // items_ins_v2*.json (required for synthetic goals)
	Human    string // items_human_ins.json (required for human goals)
	Reviews  string // reviews*.json (optional)
}

// FindFiles looks for the data files in dir. When several files match a
// pattern the smallest one wins (the 1000-product subset beside the full one).
func FindFiles(dir string) (Files, error) {
	if st, err := os.Stat(dir); err != nil {
		return Files{}, fmt.Errorf("%w: data directory: %v", ErrNoData, err)
	} else if !st.IsDir() {
		return Files{}, fmt.Errorf("%w: data directory %s is not a directory", ErrNoData, dir)
	}
	pick := func(pattern string) string {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		best, bestSize := "", int64(math.MaxInt64)
		sort.Strings(m)
		for _, f := range m {
			if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() && st.Size() < bestSize {
				best, bestSize = f, st.Size()
			}
		}
		return best
	}
	f := Files{
		Products: pick("items_shuffle*.json"),
		Attrs:    pick("items_ins_v2*.json"),
		Human:    pick("items_human_ins*.json"),
		Reviews:  pick("reviews*.json"),
	}
	if f.Products == "" {
		return f, fmt.Errorf("%w: no items_shuffle*.json in %s", ErrNoData, dir)
	}
	return f, nil
}

// rawData is the content of the data files before clean-up.
type rawData struct {
	products []json.RawMessage
	attrs    map[string]rawAttr
	human    map[string][]rawHuman
	reviews  []rawReviewEntry
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoData, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadData, filepath.Base(path), err)
	}
	return nil
}

func readFiles(f Files) (*rawData, error) {
	rd := &rawData{}
	if err := readJSON(f.Products, &rd.products); err != nil {
		return nil, err
	}
	if f.Attrs != "" {
		if err := readJSON(f.Attrs, &rd.attrs); err != nil {
			return nil, err
		}
	}
	if f.Human != "" {
		if err := readJSON(f.Human, &rd.human); err != nil {
			return nil, err
		}
	}
	if f.Reviews != "" {
		if err := readJSON(f.Reviews, &rd.reviews); err != nil {
			return nil, err
		}
	}
	return rd, nil
}

// buildProducts applies the original's load_products clean-up.
func buildProducts(rd *rawData, limit int, keepReviews bool) ([]*Product, error) {
	reviews := map[string]rawReviewEntry{}
	if keepReviews {
		for _, r := range rd.reviews {
			reviews[r.ASIN] = r
		}
	}
	raws := rd.products
	if limit > 0 && limit < len(raws) {
		raws = raws[:limit]
	}
	seen := map[string]bool{}
	var out []*Product
	for i, rawMsg := range raws {
		var rp rawProduct
		if err := json.Unmarshal(rawMsg, &rp); err != nil {
			return nil, fmt.Errorf("%w: product %d: %v", ErrBadData, i, err)
		}
		asin := jsonScalarText(rp.ASIN, "nan")
		if asin == "nan" || asin == "" || len(asin) > 10 || seen[asin] {
			continue
		}
		seen[asin] = true
		opts, err := orderedOptions(rp.CustomizationOptions)
		if err != nil {
			return nil, fmt.Errorf("%w: product %s: %v", ErrBadData, asin, err)
		}
		p := &Product{
			ASIN:            asin,
			Title:           str(rp.Name),
			Description:     str(rp.FullDescription),
			BulletPoints:    stringList(rp.SmallDescription),
			Category:        str(rp.Category),
			Query:           strings.TrimSpace(strings.ToLower(str(rp.Query))),
			ProductCategory: str(rp.ProductCategory),
			Options:         opts,
			Rating:          "N.A.",
		}
		p.Pricing, p.PriceTag = parsePricing(rp.Pricing)
		if r, ok := reviews[asin]; ok {
			p.Rating = jsonScalarText(r.AverageRating, "N.A.")
			for _, rv := range r.Reviews {
				score := jsonScalarText(rv.Score, "")
				if score == "" {
					score = jsonScalarText(rv.Stars, "")
				}
				body := rv.Body
				if body == "" {
					body = rv.Review
				}
				p.Reviews = append(p.Reviews, Review{Title: rv.Title, Score: score, Body: body})
			}
		}
		if a, ok := rd.attrs[asin]; ok && a.Attributes != nil {
			p.Attributes = a.Attributes
		} else {
			p.Attributes = []string{"DUMMY_ATTR"}
		}
		if a, ok := rd.attrs[asin]; ok && a.Instruction != nil && *a.Instruction != "" {
			p.Instruction = *a.Instruction
			p.InstructionAttributes = a.InstructionAttributes
		}
		for _, h := range rd.human[asin] {
			values, names := optionValuesNamed(h.InstructionOptions)
			p.HumanInstructions = append(p.HumanInstructions, HumanInstruction{
				Instruction: h.Instruction,
				Attributes:  h.InstructionAttributes,
				Options:     values,
				OptionNames: names,
			})
		}
		p.titleLower = strings.ToLower(p.Title)
		p.bulletsLower = strings.ToLower(strings.Join(p.BulletPoints, " "))
		p.descLower = strings.ToLower(p.Description)
		out = append(out, p)
	}
	return out, nil
}

// priceSeed fixes the draws the original leaves to an unseeded RNG (prices of
// ranged products, price bounds of goals).
const priceSeed = 233

// productPrices draws one price per product: the single price, or a uniform
// draw in the [low, high] range.
func productPrices(products []*Product) map[string]float64 {
	rng := rand.New(rand.NewPCG(priceSeed, 1))
	out := make(map[string]float64, len(products))
	for _, p := range products {
		switch len(p.Pricing) {
		case 0:
			out[p.ASIN] = 100
		case 1:
			out[p.ASIN] = p.Pricing[0]
		default:
			lo, hi := p.Pricing[0], p.Pricing[1]
			out[p.ASIN] = lo + (hi-lo)*rng.Float64()
		}
	}
	return out
}

// priceBound draws the goal's price upper bound like the original: two of the
// (at most four) multiples of ten above the price, the larger one.
func priceBound(rng *rand.Rand, price float64) (float64, string) {
	var above []float64
	for i := 1; i < 100 && len(above) < 4; i++ {
		if v := 10 * float64(i); v > price {
			above = append(above, v)
		}
	}
	if len(above) < 2 {
		return 1000000, ""
	}
	i := rng.IntN(len(above))
	j := rng.IntN(len(above) - 1)
	if j >= i {
		j++
	}
	upper := math.Max(above[i], above[j])
	return upper, fmt.Sprintf(", and price lower than %.2f dollars", upper)
}

// syntheticGoals builds one goal per option combination of each product with
// an items_ins_v2 instruction (the original's get_synthetic_goals).
func syntheticGoals(products []*Product, prices map[string]float64) []Goal {
	rng := rand.New(rand.NewPCG(priceSeed, 2))
	var goals []Goal
	for _, p := range products {
		if p.Instruction == "" || len(p.InstructionAttributes) == 0 {
			continue
		}
		upper, priceText := priceBound(rng, prices[p.ASIN])
		groups := append([]OptionGroup(nil), p.Options...)
		sort.SliceStable(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
		// Cartesian product, the last group varying fastest.
		idx := make([]int, len(groups))
		for {
			empty := false
			for _, g := range groups {
				if len(g.Values) == 0 {
					empty = true
				}
			}
			if empty {
				break
			}
			byName := map[string]string{}
			var values, names, parts []string
			for gi, g := range groups {
				v := g.Values[idx[gi]]
				byName[g.Name] = v
				values = append(values, v)
				names = append(names, g.Name)
				parts = append(parts, g.Name+": "+v)
			}
			optText := ""
			if len(parts) > 0 {
				optText = " with " + strings.Join(parts, ", and ")
			}
			goals = append(goals, Goal{
				ASIN:            p.ASIN,
				Category:        p.Category,
				Query:           p.Query,
				Name:            p.Title,
				ProductCategory: p.ProductCategory,
				Instruction:     p.Instruction + optText + priceText,
				Attributes:      p.InstructionAttributes,
				PriceUpper:      upper,
				Options:         values,
				OptionsByName:   byName,
				OptionNames:     names,
			})
			k := len(groups) - 1
			for k >= 0 {
				idx[k]++
				if idx[k] < len(groups[k].Values) {
					break
				}
				idx[k] = 0
				k--
			}
			if k < 0 {
				break
			}
		}
	}
	return goals
}

// humanGoals builds one goal per human instruction with attributes (the
// original's get_human_goals).
func humanGoals(products []*Product, prices map[string]float64) []Goal {
	rng := rand.New(rand.NewPCG(priceSeed, 3))
	var goals []Goal
	for _, p := range products {
		for _, h := range p.HumanInstructions {
			if len(h.Attributes) == 0 {
				continue
			}
			upper, priceText := priceBound(rng, prices[p.ASIN])
			goals = append(goals, Goal{
				ASIN:            p.ASIN,
				Category:        p.Category,
				Query:           p.Query,
				Name:            p.Title,
				ProductCategory: p.ProductCategory,
				Instruction:     strings.Trim(h.Instruction, ".") + priceText,
				Attributes:      h.Attributes,
				PriceUpper:      upper,
				Options:         h.Options,
				OptionNames:     h.OptionNames,
				Human:           true,
			})
		}
	}
	return goals
}
