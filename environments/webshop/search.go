package webshop

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Search parameters of the original (Pyserini/Lucene defaults and engine.py).
const (
	bm25K1        = 0.9
	bm25B         = 0.4
	searchReturnN = 50
	productWindow = 10
)

// searchDocument is the indexed text of a product, as the original's
// convert_product_file_format.py builds it: title, description, first
// bullet point and "name: v1, v2, and name: …" options, lower-cased.
func searchDocument(p *Product) string {
	var optTexts []string
	for _, g := range p.Options {
		optTexts = append(optTexts, g.Name+": "+strings.Join(g.Values, ", "))
	}
	first := ""
	if len(p.BulletPoints) > 0 {
		first = p.BulletPoints[0]
	}
	return strings.ToLower(strings.Join([]string{p.Title, p.Description, first, strings.Join(optTexts, ", and ")}, " "))
}

// posting is one document holding a term, with the term's frequency there.
type posting struct {
	doc int32
	tf  int32
}

// searchIndex is an in-memory inverted index scored like the original's
// Lucene index (see lucene.go): terms from the Anserini analyzer, one norm
// byte per document (SmallFloat.intToByte4 of its term count), Lucene 8's
// BM25 in float32, results ordered by score, then by ASIN.
type searchIndex struct {
	mu       sync.Mutex
	postings map[string][]posting
	norm     []uint8  // encoded length per document
	ids      []string // document ids (ASINs), the tie-break
	idRank   []int32  // rank of each document's id in string order
	sim      *bm25
	cache    map[string][]int
	scores   []float64 // scratch, one per document
	hit      []bool    // scratch: document touched by the query
}

const searchCacheSize = 8192

func newSearchIndex(products []*Product) (*searchIndex, error) {
	ix := &searchIndex{postings: map[string][]posting{}, cache: map[string][]int{},
		norm: make([]uint8, len(products)), ids: make([]string, len(products)),
		scores: make([]float64, len(products)), hit: make([]bool, len(products))}
	var docCount, total int64
	memo := map[string]string{}
	for d, p := range products {
		ix.ids[d] = p.ASIN
		terms := analyzeCached(searchDocument(p), memo)
		ix.norm[d] = intToByte4(len(terms))
		if len(terms) > 0 {
			docCount++ // Lucene's docCount: documents with a term in the field
			total += int64(len(terms))
		}
		tf := map[string]int32{}
		var order []string
		for _, t := range terms {
			if tf[t] == 0 {
				order = append(order, t)
			}
			tf[t]++
		}
		for _, t := range order {
			ix.postings[t] = append(ix.postings[t], posting{int32(d), tf[t]})
		}
	}
	ix.sim = newBM25(bm25K1, bm25B, docCount, total)
	order := make([]int, len(products))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ix.ids[order[a]] < ix.ids[order[b]] })
	ix.idRank = make([]int32, len(products))
	for r, d := range order {
		ix.idRank[d] = int32(r)
	}
	return ix, nil
}

// Close releases nothing (the index is plain Go memory); kept so that a
// catalogue can be closed uniformly.
func (ix *searchIndex) Close() error { return nil }

type scoredDoc struct {
	doc   int
	score float32
}

// topN orders by score (descending), then by document id, as Anserini's
// BREAK_SCORE_TIES_BY_DOCID sort, and keeps searchReturnN.
func (ix *searchIndex) topN(scored []scoredDoc) []int {
	slices.SortFunc(scored, func(x, y scoredDoc) int {
		switch {
		case x.score > y.score:
			return -1
		case x.score < y.score:
			return 1
		}
		return int(ix.idRank[x.doc]) - int(ix.idRank[y.doc])
	})
	if len(scored) > searchReturnN {
		scored = scored[:searchReturnN]
	}
	out := make([]int, len(scored))
	for i, s := range scored {
		out[i] = s.doc
	}
	return out
}

// queryClauses is Anserini's BagOfWordsQueryGenerator: the distinct terms
// of the analysed query, each with its count as the clause's boost.
func queryClauses(keywords string) (terms []string, boost []float32) {
	counts := map[string]int{}
	for _, t := range analyze(keywords) {
		if counts[t] == 0 {
			terms = append(terms, t)
		}
		counts[t]++
	}
	sort.Strings(terms) // the key of the result cache; the order does not change a score
	for _, t := range terms {
		boost = append(boost, float32(counts[t]))
	}
	return terms, boost
}

// Search returns the indexes (into the product list) of the top
// searchReturnN products for the keywords, best first.
//
// A document's score is the sum over the query's terms of Lucene's BM25
// term score (float32), added in double and rounded to float as Lucene's
// disjunction scorers do; equal scores are ordered by ASIN.
func (ix *searchIndex) Search(keywords string) ([]int, error) {
	terms, boost := queryClauses(keywords)
	var kb strings.Builder
	for i, t := range terms {
		fmt.Fprintf(&kb, "%s\x00%g\x00", t, boost[i])
	}
	key := kb.String()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if hit, ok := ix.cache[key]; ok {
		return hit, nil
	}
	var touched []int
	for ti, t := range terms {
		ps := ix.postings[t]
		if len(ps) == 0 {
			continue
		}
		weight := float32(boost[ti] * ix.sim.idf(int64(len(ps))))
		for _, p := range ps {
			d := int(p.doc)
			if !ix.hit[d] {
				ix.hit[d] = true
				touched = append(touched, d)
			}
			ix.scores[d] += float64(ix.sim.termScore(weight, float32(p.tf), ix.norm[d]))
		}
	}
	scored := make([]scoredDoc, len(touched))
	for i, d := range touched {
		scored[i] = scoredDoc{d, float32(ix.scores[d])}
		ix.scores[d], ix.hit[d] = 0, false
	}
	out := ix.topN(scored)
	if len(ix.cache) >= searchCacheSize {
		clear(ix.cache)
	}
	ix.cache[key] = out
	return out, nil
}
