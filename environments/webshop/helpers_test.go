package webshop

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/environments"
)

func envOpts(dir string) environments.Options { return environments.Options{DataDir: dir} }

var bg = context.Background()

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tinyShop writes a small hand-made catalogue in the original's format: a
// lipstick with two option groups, a shampoo with a price range and twelve
// filler lipsticks (so that "lipstick" has two result pages).
func tinyShop(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	products := []any{
		map[string]any{
			"asin": "B000000001", "name": "Acme Red Lipstick", "full_description": "A long lasting lipstick for every day.",
			"small_description": []string{"Long lasting color", "Cruelty free formula"}, "pricing": "$12.50",
			"customization_options": json.RawMessage(`{"Color": [{"value": "Ruby/Red", "image": null}, {"value": "Nude", "image": null}], "Size": [{"value": "Small"}, {"value": "Large"}]}`),
			"product_category":      "Beauty & Personal Care › Makeup › Lips › Lipstick", "query": "Lipstick ", "category": "beauty",
		},
		map[string]any{
			"asin": "B000000002", "name": "Acme Blue Shampoo", "full_description": "Sulfate free shampoo.",
			"small_description": "Gentle on hair", "pricing": "$5.00 - $9.00", "customization_options": nil,
			"product_category": "Beauty & Personal Care › Hair Care › Shampoo", "query": "shampoo", "category": "beauty",
		},
		map[string]any{"asin": "nan", "name": "skipped: bad asin"},
		map[string]any{"asin": "B000000001", "name": "skipped: duplicate"},
	}
	for i := 0; i < 12; i++ {
		products = append(products, map[string]any{
			"asin": fmt.Sprintf("B0000001%02d", i), "name": fmt.Sprintf("Filler Lipstick Number %d in a Tube", i),
			"full_description": "Plain lipstick filler text that goes on and on to make the document longer.", "small_description": []string{"Filler"},
			"pricing": "", "customization_options": map[string]any{},
			"product_category": "Beauty & Personal Care › Makeup › Lips › Lipstick", "query": "lipstick", "category": "beauty",
		})
	}
	writeJSON(t, filepath.Join(dir, "items_shuffle_tiny.json"), products)
	writeJSON(t, filepath.Join(dir, "items_ins_v2_tiny.json"), map[string]any{
		"B000000001": map[string]any{"attributes": []string{"long lasting", "cruelty free"}, "instruction": "Find me long lasting lipstick", "instruction_attributes": []string{"long lasting"}},
		"B000000002": map[string]any{"attributes": []string{"sulfate free"}},
	})
	writeJSON(t, filepath.Join(dir, "items_human_ins.json"), map[string]any{
		"B000000001": []any{map[string]any{"instruction": "i want a long lasting nude lipstick.", "instruction_attributes": []string{"long lasting"}, "instruction_options": []string{"nude"}}},
	})
	writeJSON(t, filepath.Join(dir, "reviews.json"), []any{
		map[string]any{"asin": "B000000001", "average_rating": 4.5, "reviews": []any{map[string]any{"title": "Nice", "stars": 5, "review": "Great color"}}},
	})
	return dir
}

// goalIndex finds the goal with the given option values.
func goalIndex(t testing.TB, e *Env, opts map[string]string) int {
	t.Helper()
	for i, g := range e.goals {
		match := len(g.OptionsByName) == len(opts)
		for k, v := range opts {
			if g.OptionsByName[k] != v {
				match = false
			}
		}
		if match {
			return i
		}
	}
	t.Fatalf("no goal with options %v", opts)
	return -1
}

func mustStep(t testing.TB, e *Env, action string) environments.StepResult {
	t.Helper()
	r, err := e.Step(bg, action)
	if err != nil {
		t.Fatalf("Step(%q): %v", action, err)
	}
	return r
}
