package memstore

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// NamespaceStats summarizes one namespace.
type NamespaceStats struct {
	Name      string    `json:"name"`
	Count     int       `json:"count"`
	MinScore  float64   `json:"min_score"`
	MaxScore  float64   `json:"max_score"`
	MeanScore float64   `json:"mean_score"`
	Oldest    time.Time `json:"oldest"`
	Newest    time.Time `json:"newest"`
}

// Stats summarizes the store.
type Stats struct {
	Path          string           `json:"path"`
	SchemaVersion int              `json:"schema_version"`
	Embedder      string           `json:"embedder"`
	Dim           int              `json:"dim"`
	Cap           int              `json:"cap"`
	Entries       int              `json:"entries"`
	FileBytes     int64            `json:"file_bytes"`
	Namespaces    []NamespaceStats `json:"namespaces"`
}

// Stats reports per-namespace counts and scores (from the in-memory index).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return Stats{}, ErrClosed
	}
	st := Stats{Path: s.path, SchemaVersion: SchemaVersion, Embedder: s.embID, Dim: s.dim, Cap: s.cfg.cap}
	idx := make([]*nsIndex, 0, len(s.ns))
	for _, x := range s.ns {
		idx = append(idx, x)
	}
	s.mu.RUnlock()
	for _, x := range idx {
		x.mu.RLock()
		ns := NamespaceStats{Name: x.name, Count: x.len()}
		if ns.Count > 0 {
			ns.MinScore, ns.MaxScore = math.Inf(1), math.Inf(-1)
			var sum float64
			for _, m := range x.metas {
				ns.MinScore = math.Min(ns.MinScore, m.score)
				ns.MaxScore = math.Max(ns.MaxScore, m.score)
				sum += m.score
			}
			ns.MeanScore = sum / float64(ns.Count)
			ns.Oldest = time.Unix(0, x.metas[0].created).UTC()
			ns.Newest = time.Unix(0, x.metas[ns.Count-1].created).UTC()
		}
		x.mu.RUnlock()
		st.Entries += ns.Count
		st.Namespaces = append(st.Namespaces, ns)
	}
	sort.Slice(st.Namespaces, func(i, j int) bool { return st.Namespaces[i].Name < st.Namespaces[j].Name })
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(s.path + suffix); err == nil {
			st.FileBytes += fi.Size()
		}
	}
	return st, nil
}

// List returns up to limit entries of namespace ns (all namespaces when ns
// is ""), newest first; limit <= 0 means all.
func (s *Store) List(ctx context.Context, ns string, limit int) ([]Entry, error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	var idx []*nsIndex
	for name, x := range s.ns {
		if ns == "" || name == ns {
			idx = append(idx, x)
		}
	}
	s.mu.RUnlock()
	var out []Entry
	for _, x := range idx {
		x.mu.RLock()
		for i, taken := x.len()-1, 0; i >= 0 && (limit <= 0 || taken < limit); i, taken = i-1, taken+1 {
			out = append(out, x.entry(i))
		}
		x.mu.RUnlock()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// PruneOptions selects entries to delete; the criteria combine with OR.
type PruneOptions struct {
	Namespace  string    // "" = every namespace
	Keep       int       // > 0: keep only the Keep newest entries per namespace
	Before     time.Time // non-zero: delete entries created before it
	BelowScore *float64  // non-nil: delete entries with score < *BelowScore
}

// Prune deletes the selected entries and returns how many were removed.
func (s *Store) Prune(ctx context.Context, o PruneOptions) (int, error) {
	if o.Keep <= 0 && o.Before.IsZero() && o.BelowScore == nil {
		return 0, fmt.Errorf("%w: prune needs Keep, Before or BelowScore", ErrInvalid)
	}
	var conds []string
	var args []any
	if o.Keep > 0 {
		conds = append(conds, `e.id IN (SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY namespace_id ORDER BY id DESC) AS rn FROM entries) WHERE rn > ?)`)
		args = append(args, o.Keep)
	}
	if !o.Before.IsZero() {
		conds = append(conds, "e.created_at < ?")
		args = append(args, o.Before.UnixNano())
	}
	if o.BelowScore != nil {
		conds = append(conds, "e.score < ?")
		args = append(args, *o.BelowScore)
	}
	q := "DELETE FROM entries AS e WHERE (" + strings.Join(conds, " OR ") + ")"
	if o.Namespace != "" {
		q += " AND e.namespace_id = (SELECT id FROM namespaces WHERE name = ?)"
		args = append(args, o.Namespace)
	}
	return s.mutate(ctx, o.Namespace, func(tx *sql.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// Reset deletes namespace ns with all its entries; ns "" deletes everything
// and forgets the recorded embedder (the one the store was opened with, if
// any, is recorded again).
func (s *Store) Reset(ctx context.Context, ns string) (int, error) {
	return s.mutate(ctx, ns, func(tx *sql.Tx) (int64, error) {
		var res sql.Result
		var err error
		if ns == "" {
			if res, err = tx.ExecContext(ctx, "DELETE FROM entries"); err != nil {
				return 0, err
			}
			if _, err = tx.ExecContext(ctx, "DELETE FROM namespaces"); err != nil {
				return 0, err
			}
			if _, err = tx.ExecContext(ctx, "DELETE FROM meta WHERE key IN ('embedder', 'dim')"); err != nil {
				return 0, err
			}
			s.mu.Lock()
			s.embID, s.dim = "", 0
			s.mu.Unlock()
			if s.emb != nil {
				if err := s.bindEmbedder(ctx, tx, s.emb.ID(), s.emb.Dim()); err != nil {
					return 0, err
				}
			}
		} else {
			if res, err = tx.ExecContext(ctx, "DELETE FROM entries WHERE namespace_id = (SELECT id FROM namespaces WHERE name = ?)", ns); err != nil {
				return 0, err
			}
			if _, err = tx.ExecContext(ctx, "DELETE FROM namespaces WHERE name = ?", ns); err != nil {
				return 0, err
			}
		}
		return res.RowsAffected()
	})
}

// mutate runs f in a write transaction and reloads the index of ns (all
// when ""). On failure the recorded embedder is reloaded from the file.
func (s *Store) mutate(ctx context.Context, ns string, f func(*sql.Tx) (int64, error)) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.isClosed() {
		return 0, ErrClosed
	}
	var stale bool
	var version int64
	n, err := func() (int64, error) {
		tx, st, v, err := s.beginWrite(ctx)
		if err != nil {
			return 0, err
		}
		stale, version = st, v
		defer tx.Rollback()
		n, err := f(tx)
		if err != nil {
			return 0, err
		}
		return n, tx.Commit()
	}()
	if err != nil {
		lerr := s.loadMeta(ctx)
		if lerr != nil {
			return 0, lerr
		}
		return 0, classify(err)
	}
	if stale {
		err = s.resync(ctx, version)
	} else {
		err = s.loadAll(ctx, ns)
	}
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// Record is one line of the JSONL export format.
type Record struct {
	Namespace string    `json:"namespace"`
	Content   string    `json:"content"`
	Score     float64   `json:"score"`
	Step      int64     `json:"step"`
	Episode   string    `json:"episode,omitempty"`
	Created   time.Time `json:"created"`
	Embedder  string    `json:"embedder,omitempty"`
	Dim       int       `json:"dim,omitempty"`
	Embedding []float32 `json:"embedding,omitempty"`
}

// Export writes the entries of ns (all when "") as JSONL, one Record per
// line, oldest first within each namespace, and returns the number written.
func (s *Store) Export(ctx context.Context, w io.Writer, ns string) (int, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	q := `SELECT n.name, e.content, e.score, e.step, e.episode, e.created_at, e.embedder, e.dim, e.embedding
		FROM entries e JOIN namespaces n ON n.id = e.namespace_id`
	var args []any
	if ns != "" {
		q += " WHERE n.name = ?"
		args = append(args, ns)
	}
	q += " ORDER BY n.name, e.id"
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, classify(err)
	}
	defer rows.Close()
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	n := 0
	for rows.Next() {
		var r Record
		var created int64
		var blob []byte
		if err := rows.Scan(&r.Namespace, &r.Content, &r.Score, &r.Step, &r.Episode, &created, &r.Embedder, &r.Dim, &blob); err != nil {
			return n, classify(err)
		}
		r.Created = time.Unix(0, created).UTC()
		r.Embedding = decodeVec(blob, nil)
		if err := enc.Encode(&r); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, classify(err)
	}
	return n, bw.Flush()
}

// ImportStats reports an Import.
type ImportStats struct {
	Read  int `json:"read"`  // records read
	Added int `json:"added"` // records stored (the others were duplicates)
}

// Import reads JSONL Records and adds them in one transaction (dedupe and
// cap apply as for Add, in file order). A record without an embedding is
// embedded from its content with the store's embedder. Records carrying an
// embedding must name the store's embedder; a store with none recorded
// adopts the first record's.
func (s *Store) Import(ctx context.Context, r io.Reader) (ImportStats, error) {
	var st ImportStats
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var rec Record
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return st, fmt.Errorf("%w: line %d: %v", ErrInvalid, line, err)
		}
		if rec.Namespace == "" || rec.Content == "" {
			return st, fmt.Errorf("%w: line %d: namespace and content are required", ErrInvalid, line)
		}
		if rec.Embedding != nil && (rec.Embedder == "" || rec.Dim != len(rec.Embedding)) {
			return st, fmt.Errorf("%w: line %d: an embedding needs its embedder and a matching dim", ErrInvalid, line)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("memstore: reading import: %w", err)
	}
	st.Read = len(recs)
	if len(recs) == 0 {
		return st, nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.isClosed() {
		return st, ErrClosed
	}
	tx, stale, version, err := s.beginWrite(ctx)
	if err != nil {
		return st, err
	}
	defer tx.Rollback()
	embID, dim := s.Embedder()
	adopted := false
	if embID == "" {
		for _, rec := range recs {
			if rec.Embedding != nil {
				if err := s.bindEmbedder(ctx, tx, rec.Embedder, rec.Dim); err != nil {
					return st, err
				}
				embID, dim, adopted = rec.Embedder, rec.Dim, true
				break
			}
		}
	}
	restore := func() {
		if adopted {
			s.mu.Lock()
			s.embID, s.dim = "", 0
			s.mu.Unlock()
		}
	}
	for i, rec := range recs {
		if rec.Embedding != nil && (rec.Embedder != embID || rec.Dim != dim) {
			restore()
			return st, fmt.Errorf("%w: record %d was embedded by %q (dim %d), the store uses %q (dim %d)",
				ErrEmbedderMismatch, i+1, rec.Embedder, rec.Dim, embID, dim)
		}
	}
	// Entries per namespace, in file order.
	byNS := map[string][]Entry{}
	var order []string
	for _, rec := range recs {
		if _, ok := byNS[rec.Namespace]; !ok {
			order = append(order, rec.Namespace)
		}
		byNS[rec.Namespace] = append(byNS[rec.Namespace], Entry{
			Content: rec.Content, Score: rec.Score, Step: rec.Step, Episode: rec.Episode,
			Created: rec.Created, Embedding: rec.Embedding,
		})
	}
	var ps []*pending
	for _, ns := range order {
		prep, err := s.prepare(ctx, byNS[ns])
		if err != nil {
			restore()
			return st, fmt.Errorf("namespace %q: %w", ns, err)
		}
		p, err := s.insert(ctx, tx, ns, prep)
		if err != nil {
			restore()
			return st, err
		}
		ps = append(ps, p)
	}
	if err := tx.Commit(); err != nil {
		restore()
		return st, classify(err)
	}
	for _, p := range ps {
		st.Added += len(p.ids)
	}
	if stale {
		return st, s.resync(ctx, version)
	}
	for _, p := range ps {
		if err := s.apply(ctx, p); err != nil {
			return st, fmt.Errorf("memstore: committed, but reloading %q failed: %w", p.name, err)
		}
	}
	return st, nil
}

// Check runs SQLite's integrity check over the whole file and returns
// ErrCorrupt with its first messages when the file is damaged.
func (s *Store) Check(ctx context.Context) error {
	if s.isClosed() {
		return ErrClosed
	}
	rows, err := s.db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	var msgs []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return classify(err)
		}
		if m != "ok" && len(msgs) < 5 {
			msgs = append(msgs, m)
		}
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(msgs, "; "))
	}
	return nil
}
