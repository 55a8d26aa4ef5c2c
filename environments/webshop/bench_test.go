package webshop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkSteps plays episodes on the default 1000-product synthetic
// catalogue with an empty search cache: a search, paging, the product, a
// sub-page, the options and the purchase. It reports environment steps per
// second (search + page rendering + reward), meaningful with -benchtime 1x.
func BenchmarkSteps(b *testing.B) {
	e, err := New(envOpts(""))
	if err != nil {
		b.Fatal(err)
	}
	nouns("warm up the tagger") // one-time model load, not a step cost
	const episodes = 300
	plans := make([][]string, episodes)
	for v := range plans {
		acts, err := e.GoldActions(bg, "webshop", 500+v)
		if err != nil {
			b.Fatal(err)
		}
		plans[v] = acts
	}
	b.ResetTimer()
	var steps, searches int
	var took time.Duration
	for i := 0; i < b.N; i++ {
		e.cat.index.mu.Lock()
		clear(e.cat.index.cache)
		e.cat.index.mu.Unlock()
		start := time.Now()
		for v, acts := range plans {
			if _, err := e.Reset(bg, "webshop", 500+v, 0); err != nil {
				b.Fatal(err)
			}
			extra := []string{acts[0], "click[next >]", "click[< prev]", "click[back to search]"}
			for _, a := range append(extra, acts...) {
				r, err := e.Step(bg, a)
				if err != nil {
					b.Fatal(err)
				}
				steps++
				if len(a) > 7 && a[:7] == "search[" || a == "click[next >]" || a == "click[< prev]" {
					searches++
				}
				if r.Done {
					break
				}
			}
		}
		took += time.Since(start)
	}
	b.ReportMetric(float64(steps)/took.Seconds(), "steps/s")
	b.ReportMetric(float64(searches)/took.Seconds(), "searches/s")
}

// BenchmarkSearch measures uncached BM25 queries (distinct goal
// instructions) on the 1000-product synthetic catalogue.
func BenchmarkSearch(b *testing.B) {
	cat, err := cachedCatalog("", LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var queries []string
	for i := 0; i < 500; i++ {
		g := &cat.SyntheticGoals[i]
		p, _ := cat.Product(g.ASIN)
		queries = append(queries, goldQueries(g, p)[0])
	}
	b.ResetTimer()
	var took time.Duration
	n := 0
	for i := 0; i < b.N; i++ {
		cat.index.mu.Lock()
		clear(cat.index.cache)
		cat.index.mu.Unlock()
		start := time.Now()
		for _, q := range queries {
			if _, err := cat.Search(q); err != nil {
				b.Fatal(err)
			}
			n++
		}
		took += time.Since(start)
	}
	b.ReportMetric(float64(took.Microseconds())/float64(n), "µs/search")
}

// BenchmarkLoadSynthetic1k loads a 1000-product synthetic catalogue from its
// files (JSON parsing, clean-up, goals, search index).
func BenchmarkLoadSynthetic1k(b *testing.B) {
	dir := b.TempDir()
	if _, err := WriteSynthetic(dir, 1000, 1); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var took time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := LoadDir(dir, LoadOptions{}); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
	}
	b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/load")
}

// BenchmarkLoadRealAttrs1k loads the real items_ins_v2_1000.json with a
// product file carrying its 1000 ASINs (the real items_shuffle_1000.json is
// not available here).
func BenchmarkLoadRealAttrs1k(b *testing.B) {
	dir, _ := realShop(b)
	b.ResetTimer()
	var took time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := LoadDir(dir, LoadOptions{}); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
	}
	b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/load")
}

// BenchmarkReward scores purchases of other products than the target (type
// reward with the part-of-speech tagger, fuzzy attribute/option matching).
func BenchmarkReward(b *testing.B) {
	cat, err := cachedCatalog("", LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	nouns("warm up the tagger")
	b.ResetTimer()
	var took time.Duration
	n := 0
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for k := 0; k < 1000; k++ {
			g := &cat.SyntheticGoals[k]
			p := cat.Products[(k*7)%len(cat.Products)]
			Reward(p, g, cat.Prices[p.ASIN], g.OptionsByName)
			n++
		}
		took += time.Since(start)
	}
	b.ReportMetric(float64(took.Microseconds())/float64(n), "µs/reward")
}

// realSizedShop writes a 1000-product catalogue with the sizes of the
// original's 1k files: products padded with the extra keys of the scraped
// entries to ~4.5 MB (items_shuffle_1000.json is 4,467,013 bytes) and a
// human-instructions file of ~5 MB with 12,000 instructions, most of them
// for products outside the catalogue (items_human_ins.json, 5,137,548 bytes,
// covers the full catalogue).
func realSizedShop(b *testing.B) (string, int64) {
	dir := b.TempDir()
	sf := generateSynthetic(1000, 1)
	pad := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 40)
	for i, p := range sf.products {
		p["full_description"] = p["full_description"].(string) + " " + pad[:1200+i%400]
		p["product_information"] = map[string]any{"Item Weight": "1.2 pounds", "ASIN": p["asin"], "Manufacturer": "Acme", "Notes": pad[:900]}
		p["images"] = []string{"https://m.media-amazon.com/images/I/a.jpg", "https://m.media-amazon.com/images/I/b.jpg"}
		p["small_description_old"] = pad[:700]
		p["seller_name"], p["brand"], p["list_price"], p["availability_status"] = "Acme Store", "Acme", "$19.99", "In Stock."
	}
	human := map[string][]map[string]any{}
	for k, v := range sf.human {
		human[k] = v
	}
	for i := 0; len(human) < 12000; i++ {
		human[fmt.Sprintf("B9%08d", i)] = []map[string]any{{
			"asin": fmt.Sprintf("B9%08d", i), "instruction": "i am looking for a long lasting lipstick that is cruelty free, in the color ruby red, and price lower than 40.00 dollars",
			"instruction_attributes": []string{"long lasting", "cruelty free"}, "instruction_options": []string{"ruby red"},
			"assignment_id": "3ABCDEFGHIJKLMNOPQRSTUVWXYZ0123", "worker_id": "A1B2C3D4E5F6G7",
		}}
	}
	files := map[string]any{"items_shuffle_1000.json": sf.products, "items_ins_v2_1000.json": sf.attrs,
		"items_human_ins.json": human, "reviews_1000.json": sf.reviews}
	var total int64
	for name, v := range files {
		writeJSON(b, filepath.Join(dir, name), v)
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		total += st.Size()
	}
	return dir, total
}

// BenchmarkLoadRealSized1k loads 1000 products from files of the original's
// 1k sizes (see realSizedShop): the stand-in for the real
// items_shuffle_1000.json and items_human_ins.json, which are not available
// here.
func BenchmarkLoadRealSized1k(b *testing.B) {
	dir, size := realSizedShop(b)
	b.ResetTimer()
	var took time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cat, err := LoadDir(dir, LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		if len(cat.Products) != 1000 {
			b.Fatalf("%d products", len(cat.Products))
		}
	}
	b.ReportMetric(float64(size)/1e6, "MB")
	b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/load")
}
