package webshop

import (
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
