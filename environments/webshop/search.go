package webshop

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	_ "github.com/mattn/go-sqlite3" // FTS4 with the porter tokenizer is compiled in without build tags
)

// Search parameters of the original (Pyserini/Lucene defaults and engine.py).
const (
	bm25K1        = 0.9
	bm25B         = 0.4
	searchReturnN = 50
	productWindow = 10
)

// lucene's English stop words (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET).
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "but": true,
	"by": true, "for": true, "if": true, "in": true, "into": true, "is": true, "it": true, "no": true,
	"not": true, "of": true, "on": true, "or": true, "such": true, "that": true, "the": true,
	"their": true, "then": true, "there": true, "these": true, "they": true, "this": true, "to": true,
	"was": true, "will": true, "with": true,
}

var possessive = regexp.MustCompile(`['’]s\b`)

// analyze lower-cases text, drops English possessives ("women's" → "women"),
// splits on anything that is not a letter or digit and removes stop words.
// Stemming (Porter) is left to SQLite's porter tokenizer.
func analyze(text string) []string {
	text = possessive.ReplaceAllString(strings.ToLower(text), "")
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	out := words[:0]
	for _, w := range words {
		if !stopWords[w] {
			out = append(out, w)
		}
	}
	return out
}

// searchDocument is the indexed text of a product, as the original's
// convert_product_file_format.py builds it.
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

var indexCounter atomic.Int64

// posting is one document holding a term, with the term's frequency there.
type posting struct {
	doc int32
	tf  int32
}

// searchIndex is Lucene-style BM25 over SQLite's porter stemmer. Words are
// stemmed by SQLite's porter tokenizer (through an fts3tokenize table, once
// per distinct word); the postings and the BM25 sums live in Go. An FTS4 table
// over the same documents (built on demand, searchFTS) computes the same
// ranking from matchinfo(): the tests check that both agree.
type searchIndex struct {
	mu       sync.Mutex
	db       *sql.DB
	conn     *sql.Conn
	tokStmt  *sql.Stmt
	stems    map[string]string
	postings map[string][]posting
	docs     []string  // analysed document texts (for the FTS4 table)
	docLen   []float64 // analysed tokens per document
	norm     []float64 // k1·(1 − b + b·docLen/avgdl) per document
	avgdl    float64
	cache    map[string][]int
	scores   []float64 // scratch, one per document
	ftsStmt  *sql.Stmt
}

const searchCacheSize = 8192

func newSearchIndex(products []*Product) (*searchIndex, error) {
	ctx := context.Background()
	// A private in-memory database held by one dedicated connection.
	db, err := sql.Open("sqlite3", fmt.Sprintf("file:webshop%d?mode=memory", indexCounter.Add(1)))
	if err != nil {
		return nil, fmt.Errorf("webshop: search index: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("webshop: search index: %w", err)
	}
	ix := &searchIndex{db: db, conn: conn, cache: map[string][]int{}, stems: map[string]string{},
		postings: map[string][]posting{}, scores: make([]float64, len(products))}
	fail := func(err error) (*searchIndex, error) {
		ix.Close()
		return nil, fmt.Errorf("webshop: search index: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `CREATE VIRTUAL TABLE tok USING fts3tokenize(porter)`); err != nil {
		return fail(err)
	}
	if ix.tokStmt, err = conn.PrepareContext(ctx, `SELECT token FROM tok WHERE input = ?`); err != nil {
		return fail(err)
	}
	words := make([][]string, len(products))
	var unique []string
	seen := map[string]bool{}
	total := 0.0
	for i, p := range products {
		words[i] = analyze(searchDocument(p))
		ix.docs = append(ix.docs, strings.Join(words[i], " "))
		ix.docLen = append(ix.docLen, float64(len(words[i])))
		total += float64(len(words[i]))
		for _, w := range words[i] {
			if !seen[w] {
				seen[w] = true
				unique = append(unique, w)
			}
		}
	}
	if len(products) > 0 {
		ix.avgdl = total / float64(len(products))
	}
	for _, dl := range ix.docLen {
		ix.norm = append(ix.norm, bm25K1*(1-bm25B+bm25B*dl/ix.avgdl))
	}
	if err := ix.stemAll(unique); err != nil {
		return fail(err)
	}
	for d, ws := range words {
		tf := map[string]int32{}
		var order []string
		for _, w := range ws {
			st := ix.stems[w]
			if tf[st] == 0 {
				order = append(order, st)
			}
			tf[st]++
		}
		for _, st := range order {
			ix.postings[st] = append(ix.postings[st], posting{int32(d), tf[st]})
		}
	}
	return ix, nil
}

// stemAll stems words (none already known) with SQLite's porter tokenizer,
// in batches: one token comes back per word.
func (ix *searchIndex) stemAll(words []string) error {
	const batch = 2000
	for lo := 0; lo < len(words); lo += batch {
		chunk := words[lo:min(lo+batch, len(words))]
		toks, err := ix.tokenize(strings.Join(chunk, " "))
		if err != nil {
			return err
		}
		if len(toks) != len(chunk) { // not one token per word: stem one by one
			for _, w := range chunk {
				t, err := ix.tokenize(w)
				if err != nil {
					return err
				}
				ix.stems[w] = strings.Join(t, " ")
			}
			continue
		}
		for i, w := range chunk {
			ix.stems[w] = toks[i]
		}
	}
	return nil
}

func (ix *searchIndex) tokenize(s string) ([]string, error) {
	rows, err := ix.tokStmt.Query(s)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Close releases the database.
func (ix *searchIndex) Close() error {
	for _, st := range []*sql.Stmt{ix.tokStmt, ix.ftsStmt} {
		if st != nil {
			st.Close()
		}
	}
	if ix.conn != nil {
		ix.conn.Close()
	}
	return ix.db.Close()
}

type scoredDoc struct {
	doc   int
	score float64
}

// queryTerms analyses and stems the keywords (the caller holds ix.mu).
func (ix *searchIndex) queryTerms(keywords string) ([]string, error) {
	words := analyze(keywords)
	// Bound the memory of ever-new query words. Cleared before the known
	// words are picked out, so that every word of this query gets stemmed.
	if len(ix.stems) > 1<<20 {
		clear(ix.stems)
	}
	var fresh []string
	seen := map[string]bool{}
	for _, w := range words {
		if _, ok := ix.stems[w]; !ok && !seen[w] {
			seen[w] = true
			fresh = append(fresh, w)
		}
	}
	if err := ix.stemAll(fresh); err != nil {
		return nil, err
	}
	terms := make([]string, 0, len(words))
	for _, w := range words {
		if st := ix.stems[w]; st != "" {
			terms = append(terms, st)
		}
	}
	return terms, nil
}

// idf is Lucene's BM25 inverse document frequency.
func (ix *searchIndex) idf(df float64) float64 {
	n := float64(len(ix.docLen))
	return math.Log(1 + (n-df+0.5)/(df+0.5))
}

// termScore is one term's BM25 contribution (Lucene ≥ 8 drops the constant
// (k1 + 1) factor, which does not change the ranking).
func (ix *searchIndex) termScore(idf, tf float64, doc int) float64 {
	return idf * tf / (tf + ix.norm[doc])
}

func topN(scored []scoredDoc) []int {
	sort.Slice(scored, func(i, j int) bool {
		if scored[i].score != scored[j].score {
			return scored[i].score > scored[j].score
		}
		return scored[i].doc < scored[j].doc
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

// Search returns the indexes (into the product list) of the top
// searchReturnN products for the keywords, best first; ties go to the
// earlier product, as Lucene's do. Every query word is an optional clause
// (a repeated word counts again), as in Pyserini's bag-of-words queries.
func (ix *searchIndex) Search(keywords string) ([]int, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	terms, err := ix.queryTerms(keywords)
	if err != nil {
		return nil, fmt.Errorf("webshop: search %q: %w", keywords, err)
	}
	key := strings.Join(terms, " ")
	if hit, ok := ix.cache[key]; ok {
		return hit, nil
	}
	var touched []int
	for _, t := range terms {
		ps := ix.postings[t]
		idf := ix.idf(float64(len(ps)))
		for _, p := range ps {
			d := int(p.doc)
			if ix.scores[d] == 0 {
				touched = append(touched, d)
			}
			ix.scores[d] += ix.termScore(idf, float64(p.tf), d)
		}
	}
	scored := make([]scoredDoc, len(touched))
	for i, d := range touched {
		scored[i] = scoredDoc{d, ix.scores[d]}
		ix.scores[d] = 0
	}
	out := topN(scored)
	if len(ix.cache) >= searchCacheSize {
		clear(ix.cache)
	}
	ix.cache[key] = out
	return out, nil
}

// searchFTS ranks with an FTS4 table (porter tokenizer) and the term
// statistics of matchinfo(): the reference the Go postings are checked
// against. The table is built on first use.
func (ix *searchIndex) searchFTS(keywords string) ([]int, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ctx := context.Background()
	if ix.ftsStmt == nil {
		if _, err := ix.conn.ExecContext(ctx, `CREATE VIRTUAL TABLE docs USING fts4(contents, tokenize=porter)`); err != nil {
			return nil, err
		}
		tx, err := ix.conn.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		for i, d := range ix.docs {
			if _, err := tx.Exec(`INSERT INTO docs(docid, contents) VALUES(?, ?)`, i+1, d); err != nil {
				tx.Rollback()
				return nil, err
			}
		}
		if err := tx.Commit(); err != nil {
			return nil, err
		}
		if ix.ftsStmt, err = ix.conn.PrepareContext(ctx, `SELECT docid, matchinfo(docs, 'x') FROM docs WHERE docs MATCH ?`); err != nil {
			return nil, err
		}
	}
	words := analyze(keywords)
	if len(words) == 0 {
		return nil, nil
	}
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = `"` + w + `"`
	}
	rows, err := ix.ftsStmt.Query(strings.Join(quoted, " OR "))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var scored []scoredDoc
	for rows.Next() {
		var docid int
		var mi []byte
		if err := rows.Scan(&docid, &mi); err != nil {
			return nil, err
		}
		s := 0.0
		for i := range words {
			tf := float64(binary.NativeEndian.Uint32(mi[12*i:]))
			df := float64(binary.NativeEndian.Uint32(mi[12*i+8:]))
			if tf > 0 {
				s += ix.termScore(ix.idf(df), tf, docid-1)
			}
		}
		scored = append(scored, scoredDoc{docid - 1, s})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return topN(scored), nil
}
