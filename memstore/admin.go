package memstore

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"
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

// Stats reports per-namespace counts and scores. It reads them with SQL
// (through the entries_meta index from schema version 2 on), never an
// embedding, so it costs the same with or without the vector index.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return Stats{}, ErrClosed
	}
	st := Stats{Path: s.path, SchemaVersion: SchemaVersion, Embedder: s.embID, Dim: s.dim, Cap: s.cfg.cap}
	s.mu.RUnlock()
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&st.SchemaVersion); err != nil {
		return Stats{}, classify(err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT n.name, count(e.id), min(e.score), max(e.score), avg(e.score), min(e.created_at), max(e.created_at)
		FROM namespaces n LEFT JOIN entries e ON e.namespace_id = n.id GROUP BY n.id ORDER BY n.name`)
	if err != nil {
		return Stats{}, classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var ns NamespaceStats
		var lo, hi, mean sql.NullFloat64
		var oldest, newest sql.NullInt64
		if err := rows.Scan(&ns.Name, &ns.Count, &lo, &hi, &mean, &oldest, &newest); err != nil {
			return Stats{}, classify(err)
		}
		if ns.Count > 0 {
			ns.MinScore, ns.MaxScore, ns.MeanScore = lo.Float64, hi.Float64, mean.Float64
			ns.Oldest, ns.Newest = time.Unix(0, oldest.Int64).UTC(), time.Unix(0, newest.Int64).UTC()
		}
		st.Entries += ns.Count
		st.Namespaces = append(st.Namespaces, ns)
	}
	if err := rows.Err(); err != nil {
		return Stats{}, classify(err)
	}
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(s.path + suffix); err == nil {
			st.FileBytes += fi.Size()
		}
	}
	return st, nil
}

// List returns up to limit entries of namespace ns (all namespaces when ns
// is ""), newest (highest id) first; limit <= 0 means all. It reads the
// file, not the vector index, and no embedding.
func (s *Store) List(ctx context.Context, ns string, limit int) ([]Entry, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	q := `SELECT e.id, n.name, e.content, e.score, e.step, e.episode, e.created_at
		FROM entries e JOIN namespaces n ON n.id = e.namespace_id`
	var args []any
	if ns != "" {
		q += " WHERE n.name = ?"
		args = append(args, ns)
	}
	q += " ORDER BY e.id DESC"
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var created int64
		if err := rows.Scan(&e.ID, &e.Namespace, &e.Content, &e.Score, &e.Step, &e.Episode, &created); err != nil {
			return nil, classify(err)
		}
		e.Created = time.Unix(0, created).UTC()
		out = append(out, e)
	}
	return out, classify(rows.Err())
}

// PruneOptions selects entries to delete; the criteria combine with OR.
type PruneOptions struct {
	Namespace  string    // "" = every namespace
	Keep       int       // > 0: keep only the Keep newest entries per namespace
	Before     time.Time // non-zero: delete entries created before it
	BelowScore *float64  // non-nil: delete entries with score < *BelowScore
	DryRun     bool      // only count the entries that would be deleted (works read-only)
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
	where := " WHERE (" + strings.Join(conds, " OR ") + ")"
	if o.Namespace != "" {
		where += " AND e.namespace_id = (SELECT id FROM namespaces WHERE name = ?)"
		args = append(args, o.Namespace)
	}
	if o.DryRun {
		if s.isClosed() {
			return 0, ErrClosed
		}
		var n int
		err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM entries AS e"+where, args...).Scan(&n)
		return n, classify(err)
	}
	q := "DELETE FROM entries AS e" + where
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
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// Once begun, the transaction completes or rolls back by itself; what
	// follows it (the index reload) runs even when ctx is cancelled.
	ctx = context.WithoutCancel(ctx)
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
		if errors.Is(err, ErrReadOnly) {
			return 0, err
		}
		lerr := s.loadMeta(ctx)
		if lerr != nil {
			return 0, lerr
		}
		return 0, classify(err)
	}
	if stale {
		err = s.resync(ctx, version)
	} else {
		err = s.reload(ctx, ns)
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

// ImportOptions configures ImportWith.
type ImportOptions struct {
	// DefaultEmbedder, when the store has no recorded embedder and no
	// record carries an embedding, becomes the store's embedder and embeds
	// the records (as the store's first Add with it would).
	DefaultEmbedder Embedder
}

// Import is ImportWith without options.
func (s *Store) Import(ctx context.Context, r io.Reader) (ImportStats, error) {
	return s.ImportWith(ctx, r, ImportOptions{})
}

// ImportWith reads JSONL Records and adds them in one transaction (dedupe and
// cap apply as for Add, in file order). A record without an embedding is
// embedded from its content with the store's embedder. Records carrying an
// embedding must name the store's embedder; a store with none recorded
// adopts the first record's.
func (s *Store) ImportWith(ctx context.Context, r io.Reader, opt ImportOptions) (ImportStats, error) {
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
		if !utf8.ValidString(rec.Namespace) {
			return st, fmt.Errorf("%w: line %d: namespace is not valid UTF-8", ErrInvalid, line)
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
	// The file, read inside this write transaction, is the truth: another
	// process may have recorded an embedder since this Store looked.
	embID, dim, err := readMeta(ctx, tx)
	if err != nil {
		return st, err
	}
	if mid, mdim := s.Embedder(); mid != embID || mdim != dim {
		if s.emb != nil && embID != "" && (s.emb.ID() != embID || s.emb.Dim() != dim) {
			return st, fmt.Errorf("%w: store built with %q (dim %d), opened with %q (dim %d)", ErrEmbedderMismatch, embID, dim, s.emb.ID(), s.emb.Dim())
		}
		if embID == "" && s.emb != nil {
			if err := s.bindEmbedder(ctx, tx, s.emb.ID(), s.emb.Dim()); err != nil {
				return st, err
			}
			embID, dim = s.emb.ID(), s.emb.Dim()
		} else {
			s.mu.Lock()
			s.embID, s.dim = embID, dim
			s.mu.Unlock()
		}
	}
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
	var prevEmb Embedder
	defaulted := false
	if embID == "" && !adopted && opt.DefaultEmbedder != nil {
		d := opt.DefaultEmbedder
		if d.ID() == "" || d.Dim() <= 0 {
			return st, fmt.Errorf("%w: default embedder %q has dimension %d", ErrInvalid, d.ID(), d.Dim())
		}
		if err := s.bindEmbedder(ctx, tx, d.ID(), d.Dim()); err != nil {
			return st, err
		}
		embID, dim, adopted, defaulted = d.ID(), d.Dim(), true, true
		s.mu.Lock()
		prevEmb, s.emb = s.emb, d
		s.mu.Unlock()
	}
	restore := func() {
		if adopted {
			s.mu.Lock()
			s.embID, s.dim = "", 0
			if defaulted {
				s.emb = prevEmb
			}
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
