package memstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Opening a file: the schema (created or checked), the recorded embedder
// and cap, and the in-memory index loaded from the rows (also reloaded
// when another process wrote).

func (s *Store) init() error {
	ctx := context.Background()
	var err error
	if s.w, err = s.db.Conn(ctx); err != nil {
		return classify(err)
	}
	if s.cfg.readOnly {
		if err := s.checkSchema(ctx); err != nil {
			return err
		}
	} else {
		// Several processes may open (and create) the file at once: SQLite then
		// answers "busy" where its busy handler cannot wait; retry those.
		deadline := time.Now().Add(s.cfg.busyTimeout)
		for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
			err := s.prepareSchema(ctx)
			if err == nil || !isBusy(err) || time.Now().After(deadline) {
				if err != nil {
					return err
				}
				break
			}
			time.Sleep(delay)
		}
	}
	if s.emb != nil {
		if err := s.claimEmbedder(ctx, s.emb.ID(), s.emb.Dim()); err != nil {
			return err
		}
	}
	if err := s.initCap(ctx); err != nil {
		return err
	}
	// Read the version before the rows: a commit in between is seen as a
	// change at the next write (a spurious reload at worst).
	if err := s.w.QueryRowContext(ctx, "PRAGMA data_version").Scan(&s.dataVersion); err != nil {
		return classify(err)
	}
	return s.reload(ctx, "")
}

// checkSchema is prepareSchema for a read-only open: the file must be an
// empo2 memory database this program can read; nothing is written.
func (s *Store) checkSchema(ctx context.Context) error {
	var app, ver int
	if err := s.w.QueryRowContext(ctx, "PRAGMA application_id").Scan(&app); err != nil {
		return classify(err)
	}
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&ver); err != nil {
		return classify(err)
	}
	if app != appID || ver == 0 {
		return fmt.Errorf("%w: application_id %#x, schema version %d", ErrNotStore, app, ver)
	}
	if ver > SchemaVersion {
		return fmt.Errorf("%w: schema version %d, this program knows up to %d", ErrSchemaTooNew, ver, SchemaVersion)
	}
	return nil
}

// claimEmbedder records (id, dim) as the store's embedder unless one is
// recorded already, in one write transaction (insert-if-absent, so that
// processes racing to create a file agree), and checks that the recorded
// one is (id, dim). A read-only store only checks.
func (s *Store) claimEmbedder(ctx context.Context, id string, dim int) error {
	var rid string
	var rdim int
	if s.cfg.readOnly {
		var err error
		if rid, rdim, err = readMeta(ctx, s.w); err != nil {
			return err
		}
		if rid == "" {
			return fmt.Errorf("%w: the read-only store has no recorded embedder", ErrNoEmbedder)
		}
	} else {
		err := func() error {
			tx, err := s.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
			if err != nil {
				return classify(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, "INSERT INTO meta(key, value) VALUES ('embedder', ?), ('dim', ?) ON CONFLICT(key) DO NOTHING",
				id, strconv.Itoa(dim)); err != nil {
				return classify(err)
			}
			if rid, rdim, err = readMeta(ctx, tx); err != nil {
				return err
			}
			return classify(tx.Commit())
		}()
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.embID, s.dim = rid, rdim
	s.mu.Unlock()
	if rid != id || rdim != dim {
		return fmt.Errorf("%w: store built with %q (dim %d), opened with %q (dim %d)", ErrEmbedderMismatch, rid, rdim, id, dim)
	}
	return nil
}

// initCap settles the cap: WithCap's value (recorded), else the recorded
// one, else DefaultCap (recorded).
func (s *Store) initCap(ctx context.Context) error {
	var v string
	err := s.w.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'cap'").Scan(&v)
	recorded := -1
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return classify(err)
	default:
		if recorded, err = strconv.Atoi(v); err != nil || recorded < 0 {
			return fmt.Errorf("%w: meta cap %q", ErrCorrupt, v)
		}
	}
	c := s.cfg.cap
	if !s.cfg.capSet {
		c = DefaultCap
		if recorded >= 0 {
			c = recorded
		}
	}
	if c != recorded && !s.cfg.readOnly {
		if _, err := s.w.ExecContext(ctx, "INSERT OR REPLACE INTO meta(key, value) VALUES ('cap', ?)", strconv.Itoa(c)); err != nil {
			return classify(err)
		}
	}
	s.cfg.cap = c
	return nil
}

// prepareSchema checks, in one write transaction (BEGIN IMMEDIATE, so the
// answer cannot change under us), that the file is ours or empty and not
// newer, migrates it, and then switches it to WAL.
func (s *Store) prepareSchema(ctx context.Context) error {
	err := func() error {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return classify(err)
		}
		defer tx.Rollback()
		var app, ver, n int
		if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&app); err != nil {
			return classify(err)
		}
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&ver); err != nil {
			return classify(err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
			return classify(err)
		}
		if app != appID && (app != 0 || ver != 0 || n > 0) {
			return fmt.Errorf("%w: SQLite database of another program (application_id %#x, %d objects)", ErrNotStore, app, n)
		}
		if ver > SchemaVersion {
			return fmt.Errorf("%w: schema version %d, this program knows up to %d", ErrSchemaTooNew, ver, SchemaVersion)
		}
		if ver == SchemaVersion {
			return nil
		}
		for v := ver; v < SchemaVersion; v++ {
			if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
				return fmt.Errorf("memstore: migration %d->%d: %w", v, v+1, classify(err))
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d; PRAGMA user_version = %d", appID, SchemaVersion)); err != nil {
			return classify(err)
		}
		return classify(tx.Commit())
	}()
	if err != nil {
		return err
	}
	// WAL is persistent in the file: switch only once the file is known to be ours.
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return classify(err)
	}
	if mode != "wal" {
		return fmt.Errorf("memstore: cannot use WAL journal mode (got %q)", mode)
	}
	return nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readMeta reads the recorded embedder ("" and 0 when none).
func readMeta(ctx context.Context, q queryer) (id string, dim int, err error) {
	rows, err := q.QueryContext(ctx, "SELECT key, value FROM meta WHERE key IN ('embedder', 'dim')")
	if err != nil {
		return "", 0, classify(err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return "", 0, classify(err)
		}
		m[k] = v
	}
	if err := rows.Err(); err != nil {
		return "", 0, classify(err)
	}
	if eid, ok := m["embedder"]; ok {
		d, err := strconv.Atoi(m["dim"])
		if err != nil || d <= 0 || eid == "" {
			return "", 0, fmt.Errorf("%w: meta embedder %q dim %q", ErrCorrupt, eid, m["dim"])
		}
		return eid, d, nil
	}
	return "", 0, nil
}

// loadMeta reloads the recorded embedder from the file.
func (s *Store) loadMeta(ctx context.Context) error {
	id, dim, err := readMeta(ctx, s.db)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.embID, s.dim = id, dim
	s.mu.Unlock()
	return nil
}

// reload reads the recorded embedder and the index of namespace only (all
// when "") in one read transaction, so that both come from the same
// snapshot of the file: another process may record the embedder and add
// entries between two separate reads.
func (s *Store) reload(ctx context.Context, only string) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return classify(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil { // deferred: a read snapshot
		return classify(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK")
	id, dim, err := readMeta(ctx, conn)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.embID, s.dim = id, dim
	s.mu.Unlock()
	if s.cfg.noIndex {
		return nil
	}
	return s.loadAll(ctx, conn, only, id, dim)
}

func (s *Store) bindEmbedder(ctx context.Context, ex execer, id string, dim int) error {
	if _, err := ex.ExecContext(ctx, "INSERT OR REPLACE INTO meta(key, value) VALUES ('embedder', ?), ('dim', ?)", id, strconv.Itoa(dim)); err != nil {
		return classify(err)
	}
	s.mu.Lock()
	s.embID, s.dim = id, dim
	s.mu.Unlock()
	return nil
}

// loadAll (re)builds the in-memory index of namespace only, or of every
// namespace when only is "". Caller holds no index lock; it replaces the
// map entries under s.mu.
func (s *Store) loadAll(ctx context.Context, q queryer, only string, embID string, dim int) error {
	// Row counts per namespace, to allocate each matrix once.
	counts := map[int64]int{}
	crows, err := q.QueryContext(ctx, "SELECT namespace_id, count(*) FROM entries GROUP BY namespace_id")
	if err != nil {
		return classify(err)
	}
	for crows.Next() {
		var id int64
		var n int
		if err := crows.Scan(&id, &n); err != nil {
			crows.Close()
			return classify(err)
		}
		counts[id] = n
	}
	if err := crows.Close(); err != nil {
		return classify(err)
	}
	query := `SELECT n.id, n.name, e.id, e.content, e.score, e.step, e.episode, e.created_at, e.embedder, e.dim, e.embedding
		FROM namespaces n LEFT JOIN entries e ON e.namespace_id = n.id`
	args := []any{}
	if only != "" {
		query += " WHERE n.name = ?"
		args = append(args, only)
	}
	query += " ORDER BY n.id, e.id"
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	fresh := map[string]*nsIndex{}
	var cur *nsIndex
	for rows.Next() {
		var (
			nsID                    int64
			name                    string
			id, step, created, edim sql.NullInt64
			content, episode, eid   sql.NullString
			score                   sql.NullFloat64
			blob                    sql.RawBytes
		)
		if err := rows.Scan(&nsID, &name, &id, &content, &score, &step, &episode, &created, &eid, &edim, &blob); err != nil {
			return classify(err)
		}
		if cur == nil || cur.id != nsID {
			cur = &nsIndex{id: nsID, name: name, dim: dim}
			if n := counts[nsID]; n > 0 {
				cur.ids = make([]int64, 0, n)
				cur.vecs = make([]float32, 0, n*dim)
				cur.metas = make([]entryMeta, 0, n)
			}
			fresh[name] = cur
		}
		if !id.Valid {
			continue // namespace without entries
		}
		if eid.String != embID || int(edim.Int64) != dim {
			return fmt.Errorf("%w: entry %d was embedded by %q (dim %d), the store by %q (dim %d)",
				ErrCorrupt, id.Int64, eid.String, edim.Int64, embID, dim)
		}
		if len(blob) != 4*dim {
			return fmt.Errorf("%w: entry %d has a %d-byte embedding, want %d", ErrCorrupt, id.Int64, len(blob), 4*dim)
		}
		cur.ids = append(cur.ids, id.Int64)
		cur.vecs = decodeVec(blob, cur.vecs)
		cur.metas = append(cur.metas, entryMeta{content: content.String, score: score.Float64, step: step.Int64, episode: episode.String, created: created.Int64})
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if only == "" {
		s.ns = fresh
	} else if x, ok := fresh[only]; ok {
		s.ns[only] = x
	} else {
		delete(s.ns, only)
	}
	return nil
}

func encodeVec(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func decodeVec(b []byte, dst []float32) []float32 {
	n := len(b) / 4
	dst = slices.Grow(dst, n)
	base := len(dst)
	dst = dst[:base+n]
	out := dst[base:]
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return dst
}
