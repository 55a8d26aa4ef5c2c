package webshop

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
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

// analyze lower-cases text, drops English possessives ("women's" → "women"),
// splits on anything that is not a letter or digit and removes stop words.
// Stemming (Porter) is left to SQLite's porter tokenizer.
func analyze(text string) []string {
	text = strings.ToLower(text)
	text = strings.NewReplacer("'s ", " ", "’s ", " ").Replace(text + " ")
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

// searchIndex is BM25 over an in-memory SQLite FTS4 table. FTS4 gives the
// porter-stemmed term statistics through matchinfo(); the BM25 formula is
// computed here.
type searchIndex struct {
	mu     sync.Mutex
	db     *sql.DB
	conn   *sql.Conn
	stmt   *sql.Stmt
	docLen []float64 // analysed tokens per document, by docid-1
	avgdl  float64
	cache  map[string][]int
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
	ix := &searchIndex{db: db, conn: conn, cache: map[string][]int{}}
	fail := func(err error) (*searchIndex, error) {
		ix.Close()
		return nil, fmt.Errorf("webshop: search index: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `CREATE VIRTUAL TABLE docs USING fts4(contents, tokenize=porter)`); err != nil {
		return fail(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	ins, err := tx.Prepare(`INSERT INTO docs(docid, contents) VALUES(?, ?)`)
	if err != nil {
		tx.Rollback()
		return fail(err)
	}
	total := 0.0
	for i, p := range products {
		toks := analyze(searchDocument(p))
		ix.docLen = append(ix.docLen, float64(len(toks)))
		total += float64(len(toks))
		if _, err := ins.Exec(i+1, strings.Join(toks, " ")); err != nil {
			tx.Rollback()
			return fail(err)
		}
	}
	ins.Close()
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	if len(products) > 0 {
		ix.avgdl = total / float64(len(products))
	}
	ix.stmt, err = conn.PrepareContext(ctx, `SELECT docid, matchinfo(docs, 'x') FROM docs WHERE docs MATCH ?`)
	if err != nil {
		return fail(err)
	}
	return ix, nil
}

// Close releases the database.
func (ix *searchIndex) Close() error {
	if ix.stmt != nil {
		ix.stmt.Close()
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

// Search returns the indexes (into the product list) of the top
// searchReturnN products for the keywords, best first; ties go to the
// earlier product, as Lucene's do.
func (ix *searchIndex) Search(keywords string) ([]int, error) {
	terms := analyze(keywords)
	key := strings.Join(terms, " ")
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if hit, ok := ix.cache[key]; ok {
		return hit, nil
	}
	if len(terms) == 0 {
		return nil, nil
	}
	quoted := make([]string, len(terms))
	for i, t := range terms {
		quoted[i] = `"` + t + `"`
	}
	rows, err := ix.stmt.Query(strings.Join(quoted, " OR "))
	if err != nil {
		return nil, fmt.Errorf("webshop: search %q: %w", keywords, err)
	}
	defer rows.Close()
	n := float64(len(ix.docLen))
	var scored []scoredDoc
	for rows.Next() {
		var docid int
		var mi []byte
		if err := rows.Scan(&docid, &mi); err != nil {
			return nil, fmt.Errorf("webshop: search %q: %w", keywords, err)
		}
		if docid < 1 || docid > len(ix.docLen) || len(mi) < 12*len(terms) {
			continue
		}
		norm := bm25K1 * (1 - bm25B + bm25B*ix.docLen[docid-1]/ix.avgdl)
		s := 0.0
		for i := range terms {
			tf := float64(binary.NativeEndian.Uint32(mi[12*i:]))
			df := float64(binary.NativeEndian.Uint32(mi[12*i+8:]))
			if tf == 0 {
				continue
			}
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			s += idf * tf / (tf + norm)
		}
		scored = append(scored, scoredDoc{docid - 1, s})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("webshop: search %q: %w", keywords, err)
	}
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
	if len(ix.cache) >= searchCacheSize {
		clear(ix.cache)
	}
	ix.cache[key] = out
	return out, nil
}
