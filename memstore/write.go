package memstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-sqlite3"
)

// Writing: Add embeds and dedupes entries, inserts them and evicts past the
// cap in one transaction, then applies them to the in-memory index.

// beginWrite starts a write transaction on the write connection (caller
// holds wmu) and reports whether another connection committed since the
// index was last in sync, with the version to record once it is again.
func (s *Store) beginWrite(ctx context.Context) (tx *sql.Tx, stale bool, version int64, err error) {
	if s.cfg.readOnly {
		return nil, false, 0, ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return nil, false, 0, err
	}
	// A transaction begun is finished or rolled back by its caller, never
	// by ctx: database/sql would roll it back from another goroutine when
	// ctx is cancelled, discarding the write connection under a statement
	// in flight ("sql: connection is already closed", then "cannot start a
	// transaction within a transaction"; issue 38 §5).
	if tx, err = s.w.BeginTx(context.WithoutCancel(ctx), nil); err != nil {
		return nil, false, 0, classify(err)
	}
	if err = tx.QueryRowContext(ctx, "PRAGMA data_version").Scan(&version); err != nil {
		tx.Rollback()
		if cerr := ctx.Err(); cerr != nil {
			return nil, false, 0, cerr // cancelled during the query: SQLite's "interrupted" means ctx
		}
		return nil, false, 0, classify(err)
	}
	return tx, version != s.dataVersion, version, nil
}

// resync reloads every namespace after a write that found the file changed
// by another connection (caller holds wmu).
func (s *Store) resync(ctx context.Context, version int64) error {
	if err := s.reload(ctx, ""); err != nil {
		return err
	}
	s.dataVersion = version
	return nil
}

func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

// prepare validates entries and fills their normalized embeddings (embedding
// Key/Content where needed). It returns copies; the caller's slice is not
// modified.
func (s *Store) prepare(ctx context.Context, entries []Entry) ([]Entry, error) {
	s.mu.RLock()
	closed, embID, dim, emb := s.closed, s.embID, s.dim, s.emb
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	out := make([]Entry, len(entries))
	copy(out, entries)
	var texts []string
	var need []int
	for i := range out {
		if out[i].Content == "" {
			return nil, fmt.Errorf("%w: entry %d has empty content", ErrInvalid, i)
		}
		// Stored as SQLite TEXT and exported as JSON, where invalid UTF-8
		// would become U+FFFD (and a duplicate on re-import): refuse it.
		if !utf8.ValidString(out[i].Content) || !utf8.ValidString(out[i].Episode) {
			return nil, fmt.Errorf("%w: entry %d: content and episode must be valid UTF-8", ErrInvalid, i)
		}
		if math.IsNaN(out[i].Score) || math.IsInf(out[i].Score, 0) {
			return nil, fmt.Errorf("%w: entry %d has score %v", ErrInvalid, i, out[i].Score)
		}
		if out[i].Embedding == nil {
			t := out[i].Key
			if t == "" {
				t = out[i].Content
			}
			texts = append(texts, t)
			need = append(need, i)
		}
	}
	if len(need) > 0 {
		if emb == nil {
			return nil, fmt.Errorf("%w: %d entries have no embedding and the store was opened without an embedder", ErrNoEmbedder, len(need))
		}
		vecs, err := emb.Embed(ctx, texts)
		if err != nil {
			return nil, fmt.Errorf("memstore: embedding: %w", err)
		}
		if len(vecs) != len(texts) {
			return nil, fmt.Errorf("memstore: embedder %q returned %d vectors for %d texts", emb.ID(), len(vecs), len(texts))
		}
		for j, i := range need {
			out[i].Embedding = vecs[j]
		}
	}
	if embID == "" {
		return nil, fmt.Errorf("%w: the store has no recorded embedder yet; open it with one", ErrNoEmbedder)
	}
	for i := range out {
		if len(out[i].Embedding) != dim {
			return nil, fmt.Errorf("%w: entry %d has dimension %d, the store %d (%s)", ErrDimMismatch, i, len(out[i].Embedding), dim, embID)
		}
		for _, x := range out[i].Embedding {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("%w: entry %d has a non-finite embedding", ErrInvalid, i)
			}
		}
		out[i].Embedding, _ = normalize(out[i].Embedding)
		if out[i].Created.IsZero() {
			out[i].Created = time.Now()
		}
	}
	return out, nil
}

// pending is an index update to apply after a commit.
type pending struct {
	nsID  int64
	name  string
	ids   []int64
	vecs  [][]float32
	metas []entryMeta
	evict int
	total int // rows of the namespace in the file after the transaction; -1 unknown
}

// Add stores entries in namespace ns in one transaction and returns how many
// were new (exact-duplicate contents, within the batch or already stored,
// are skipped). When the namespace exceeds the cap, its oldest entries are
// evicted in the same transaction.
func (s *Store) Add(ctx context.Context, ns string, entries []Entry) (int, error) {
	if ns == "" {
		return 0, fmt.Errorf("%w: empty namespace", ErrInvalid)
	}
	if !utf8.ValidString(ns) {
		return 0, fmt.Errorf("%w: namespace is not valid UTF-8", ErrInvalid)
	}
	if s.cfg.readOnly {
		return 0, ErrReadOnly
	}
	if len(entries) == 0 {
		return 0, nil
	}
	prep, err := s.prepare(ctx, entries)
	if err != nil {
		return 0, err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.isClosed() {
		return 0, ErrClosed
	}
	tx, stale, version, err := s.beginWrite(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	// Once begun, the write completes even when ctx is cancelled (an
	// interrupt waits for it, as for a checkpoint).
	ctx = context.WithoutCancel(ctx)
	p, err := s.insert(ctx, tx, ns, prep)
	if err != nil {
		return 0, err
	}
	if testHookBeforeCommit != nil {
		testHookBeforeCommit(s)
	}
	if err := tx.Commit(); err != nil {
		return 0, classify(err)
	}
	if stale {
		err = s.resync(ctx, version)
	} else {
		err = s.apply(ctx, p)
	}
	if err != nil {
		return len(p.ids), fmt.Errorf("memstore: committed, but reloading %q failed: %w", ns, err)
	}
	return len(p.ids), nil
}

// testHookBeforeCommit, set only by tests, runs in Add once the batch's rows
// are written to the open transaction, just before the commit.
var testHookBeforeCommit func(*Store)

// insert writes entries into ns within tx (caller holds wmu) and returns
// the index update to apply after the commit.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, ns string, entries []Entry) (*pending, error) {
	p := &pending{name: ns, total: -1}
	// Resolved in SQL, not from memory: another process may have made (or
	// reset) the namespace.
	if _, err := tx.ExecContext(ctx, "INSERT INTO namespaces(name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING", ns, time.Now().UnixNano()); err != nil {
		return nil, classify(err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT id FROM namespaces WHERE name = ?", ns).Scan(&p.nsID); err != nil {
		return nil, classify(err)
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO entries
		(namespace_id, content, content_hash, score, step, episode, created_at, embedder, dim, embedding)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return nil, classify(err)
	}
	defer stmt.Close()
	embID, dim := s.Embedder()
	for i := range entries {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		e := &entries[i]
		if len(e.Embedding) != dim { // the embedder was reset since prepare
			return nil, fmt.Errorf("%w: entry %d has dimension %d, the store %d (%s)", ErrDimMismatch, i, len(e.Embedding), dim, embID)
		}
		h := sha256.Sum256([]byte(e.Content))
		created := e.Created.UnixNano()
		res, err := stmt.ExecContext(ctx, p.nsID, e.Content, h[:], e.Score, e.Step, e.Episode, created, embID, dim, encodeVec(e.Embedding))
		if err != nil {
			return nil, classify(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n == 0 {
			continue // duplicate content
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		p.ids = append(p.ids, id)
		p.vecs = append(p.vecs, e.Embedding)
		p.metas = append(p.metas, entryMeta{content: e.Content, score: e.Score, step: e.Step, episode: e.Episode, created: created})
	}
	if s.cfg.cap > 0 {
		// Counted in SQL so that the file obeys the cap even when this
		// process's index is stale.
		var total int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM entries WHERE namespace_id = ?", p.nsID).Scan(&total); err != nil {
			return nil, classify(err)
		}
		if over := total - s.cfg.cap; over > 0 {
			// Ids grow with insertion: evict the `over` oldest rows.
			res, err := tx.ExecContext(ctx, `DELETE FROM entries WHERE id IN
				(SELECT id FROM entries WHERE namespace_id = ? ORDER BY id LIMIT ?)`, p.nsID, over)
			if err != nil {
				return nil, classify(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return nil, err
			}
			p.evict = int(n)
			total -= int(n)
		}
		p.total = total
	}
	return p, nil
}

// apply updates the in-memory index after a commit (caller holds wmu). When
// the index turns out to be stale (the file was changed by another process),
// the namespace is reloaded from the file instead.
func (s *Store) apply(ctx context.Context, p *pending) error {
	if s.cfg.noIndex {
		return nil
	}
	s.mu.Lock()
	x := s.ns[p.name]
	if x == nil {
		x = &nsIndex{id: p.nsID, name: p.name, dim: s.dim}
		s.ns[p.name] = x
	}
	s.mu.Unlock()
	x.mu.Lock()
	stale := x.id != p.nsID
	if !stale {
		x.appendRows(p.ids, p.vecs, p.metas)
		x.dropOldest(p.evict)
		stale = p.total >= 0 && x.len() != p.total
	}
	x.mu.Unlock()
	if stale {
		return s.reload(ctx, p.name)
	}
	return nil
}
