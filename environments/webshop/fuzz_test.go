package webshop

import (
	"encoding/json"
	"testing"
)

// FuzzLoadCatalog feeds arbitrary JSON documents to the loader, the search
// and the reward: a malformed file must give an error, never a panic. (go
// test runs the seeds; go test -fuzz FuzzLoadCatalog explores.)
func FuzzLoadCatalog(f *testing.F) {
	f.Add(`[{"asin": "B01", "name": "Red Shoe", "pricing": "$1 - $2", "customization_options": {"Size": [{"value": "7/8"}]}, "small_description": ["x"]}]`,
		`{"B01": {"attributes": ["red"], "instruction": "Find me red shoes", "instruction_attributes": ["red"]}}`,
		`{"B01": [{"instruction": "i want red shoes.", "instruction_attributes": ["red"], "instruction_options": {"size": "7 | 8"}}]}`)
	f.Add(`[{"asin": 5, "name": null, "pricing": ["$3", "x"], "customization_options": [], "small_description": 7, "query": null}]`,
		`{"5": {"attributes": null, "instruction": "", "instruction_attributes": []}}`, `{"5": []}`)
	f.Add(`[{"asin": "B02", "customization_options": {"Color": [{"value": {"a": 1}}, {"value": null}], "color": null}, "pricing": "$"}]`,
		`{"B02": {"instruction": "Find", "instruction_attributes": [""]}}`, `{"B02": [{"instruction_attributes": ["x"], "instruction_options": [1, null]}]}`)
	f.Add(`[null, 1, "x", {}]`, `[]`, `{}`)
	f.Fuzz(func(t *testing.T, products, attrs, human string) {
		rd := &rawData{}
		if json.Unmarshal([]byte(products), &rd.products) != nil {
			return // readJSON reports this as ErrBadData
		}
		if json.Unmarshal([]byte(attrs), &rd.attrs) != nil {
			rd.attrs = nil
		}
		if json.Unmarshal([]byte(human), &rd.human) != nil {
			rd.human = nil
		}
		cat, err := newCatalog(rd, LoadOptions{})
		if err != nil {
			return
		}
		defer cat.index.Close()
		if _, err := cat.Search("red shoe 7"); err != nil {
			t.Fatal(err)
		}
		for _, gs := range [][]Goal{cat.SyntheticGoals, cat.HumanGoals} {
			for i := range gs {
				if i == 3 {
					break
				}
				g := &gs[i]
				p, ok := cat.Product(g.ASIN)
				if !ok {
					t.Fatalf("goal for unknown product %s", g.ASIN)
				}
				Reward(p, g, cat.Prices[p.ASIN], g.OptionsByName)
			}
		}
	})
}
