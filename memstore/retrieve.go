package memstore

import (
	"context"
	"fmt"
)

// Retrieval: the query and result types and the cosine search over a
// namespace's in-memory index.

// Match is a retrieved entry with its cosine similarity to the query.
type Match struct {
	Entry
	Similarity float32 `json:"similarity"`
}

// Order is the ranking of retrieved entries.
type Order int

const (
	// OrderByScore ranks by stored score, descending; ties by similarity,
	// then newer first.
	OrderByScore Order = iota
	// OrderBySimilarity ranks by cosine similarity, descending; ties newer first.
	OrderBySimilarity
	// OrderByScoreStable ranks by stored score, descending; ties in
	// insertion order (older first), as a stable sort by score of the
	// entries in the order they were added. This is the EMPO² reference
	// code's ranking: when every entry of an episode shares one key, the
	// best earlier episode's entries come out step by step.
	OrderByScoreStable
)

// Valid reports whether o is a known order.
func (o Order) Valid() bool { return o >= OrderByScore && o <= OrderByScoreStable }

// Query parameterizes retrieval. Every field means what it says: K ≥ 1
// entries are returned at most, Threshold is the similarity an entry must
// exceed (0 accepts every positive cosine, −1 or less accepts all);
// DefaultQuery is the EMPO² reference's K 10, threshold 0.5.
type Query struct {
	K         int
	Threshold float32
	Order     Order
}

// DefaultQuery is K = DefaultK, Threshold = DefaultThreshold, OrderByScore.
func DefaultQuery() Query { return Query{K: DefaultK, Threshold: DefaultThreshold} }

// check reports ErrInvalid for a K < 1, a NaN threshold or an unknown order.
func (q Query) check() error {
	if q.K < 1 || q.Threshold != q.Threshold || !q.Order.Valid() {
		return fmt.Errorf("%w: query K %d (want ≥ 1), threshold %v, order %d", ErrInvalid, q.K, q.Threshold, q.Order)
	}
	return nil
}

// Result of a retrieval: the top K entries above the threshold, and Count,
// the number of entries of the namespace above the threshold (Count >=
// len(Entries)).
type Result struct {
	Entries []Match `json:"entries"`
	Count   int     `json:"count"`
}

func (s *Store) index(ns string) (*nsIndex, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	return s.ns[ns], nil
}

// Retrieve returns the entries of ns whose cosine similarity to query is >
// q.Threshold, ranked by q.Order, top q.K, and the count of all such entries.
// query need not be normalized. An unknown namespace gives an empty Result.
func (s *Store) Retrieve(ctx context.Context, ns string, query []float32, q Query) (Result, error) {
	if s.cfg.noIndex {
		return Result{}, ErrNoIndex
	}
	if err := q.check(); err != nil {
		return Result{}, err
	}
	x, err := s.index(ns)
	if err != nil {
		return Result{}, err
	}
	_, dim := s.Embedder()
	if len(query) != dim {
		return Result{}, fmt.Errorf("%w: query has dimension %d, the store %d", ErrDimMismatch, len(query), dim)
	}
	if x == nil {
		return Result{Entries: []Match{}}, nil
	}
	qn, ok := normalize(query)
	if !ok {
		return Result{Entries: []Match{}}, nil
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	hits, count := x.search(qn, q.Threshold, q.K, q.Order)
	res := Result{Entries: make([]Match, len(hits)), Count: count}
	for i, h := range hits {
		res.Entries[i] = Match{Entry: x.entry(int(h.row)), Similarity: h.sim}
	}
	return res, nil
}

// RetrieveText embeds text with the store's embedder and retrieves.
func (s *Store) RetrieveText(ctx context.Context, ns, text string, q Query) (Result, error) {
	s.mu.RLock()
	emb := s.emb
	s.mu.RUnlock()
	if emb == nil {
		return Result{}, fmt.Errorf("%w: cannot embed the query", ErrNoEmbedder)
	}
	v, err := emb.Embed(ctx, []string{text})
	if err != nil {
		return Result{}, fmt.Errorf("memstore: embedding the query: %w", err)
	}
	if len(v) != 1 {
		return Result{}, fmt.Errorf("memstore: embedder %q returned %d vectors for 1 text", emb.ID(), len(v))
	}
	return s.Retrieve(ctx, ns, v[0], q)
}

// TextQuery is one query of RetrieveTexts.
type TextQuery struct {
	Namespace string
	Text      string
}

// RetrieveTexts embeds all texts in one Embed call (a model embedder batches
// them) and retrieves for each; results are in the order of qs.
func (s *Store) RetrieveTexts(ctx context.Context, qs []TextQuery, q Query) ([]Result, error) {
	s.mu.RLock()
	emb := s.emb
	s.mu.RUnlock()
	if emb == nil {
		return nil, fmt.Errorf("%w: cannot embed the queries", ErrNoEmbedder)
	}
	if err := q.check(); err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, nil
	}
	texts := make([]string, len(qs))
	for i, tq := range qs {
		texts[i] = tq.Text
	}
	vecs, err := emb.Embed(ctx, texts)
	if err != nil {
		return nil, fmt.Errorf("memstore: embedding the queries: %w", err)
	}
	if len(vecs) != len(qs) {
		return nil, fmt.Errorf("memstore: embedder %q returned %d vectors for %d texts", emb.ID(), len(vecs), len(qs))
	}
	out := make([]Result, len(qs))
	for i, tq := range qs {
		if out[i], err = s.Retrieve(ctx, tq.Namespace, vecs[i], q); err != nil {
			return nil, err
		}
	}
	return out, nil
}
