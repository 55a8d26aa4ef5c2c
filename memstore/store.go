package memstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-sqlite3"
)

// Defaults of the EMPO² reference.
const (
	DefaultCap       = 1000
	DefaultK         = 10
	DefaultThreshold = 0.5
)

// Entry is one memory entry. On Add, Embedding is the key vector; when it is
// nil the store embeds Key (or Content when Key is empty) with its embedder.
// ID, Namespace are set by the store; a zero Created means now.
type Entry struct {
	ID        int64     `json:"id,omitempty"`
	Namespace string    `json:"namespace,omitempty"`
	Key       string    `json:"-"`
	Content   string    `json:"content"`
	Score     float64   `json:"score"`
	Step      int64     `json:"step"`
	Episode   string    `json:"episode,omitempty"`
	Created   time.Time `json:"created"`
	Embedding []float32 `json:"-"`
}

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

// Option configures Open.
type Option func(*config)

type config struct {
	cap         int
	capSet      bool
	busyTimeout time.Duration
	syncFull    bool
	readOnly    bool
	noIndex     bool
}

// WithCap sets the per-namespace capacity and records it in the file;
// n == 0 means no cap, and a negative n makes Open fail with ErrInvalid.
// Without it, the file's recorded cap applies (1000, DefaultCap, for a new
// file), so that an administrative open never evicts by surprise.
func WithCap(n int) Option {
	return func(c *config) {
		c.cap, c.capSet = n, true
	}
}

// ReadOnly opens an existing database for reading only (SQLite mode=ro; when
// the WAL's shared-memory file can be neither found nor created, e.g. a
// read-only directory, the file is opened immutable). Nothing is written to
// the file or beside it; every write method returns ErrReadOnly.
func ReadOnly() Option { return func(c *config) { c.readOnly = true } }

// WithoutIndex skips the in-memory vector index: Open reads no embedding,
// Retrieve and RetrieveText return ErrNoIndex, and Stats, List, Export and
// the write methods work as usual (for administration of big files).
func WithoutIndex() Option { return func(c *config) { c.noIndex = true } }

// WithBusyTimeout sets SQLite's busy timeout (default 5 s).
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busyTimeout = d } }

// WithSyncFull makes every commit fsync the WAL (synchronous=FULL), which
// survives power loss too; the default (NORMAL) survives process crashes.
func WithSyncFull() Option { return func(c *config) { c.syncFull = true } }

// Store is an open memory database. All methods are safe for concurrent use.
type Store struct {
	path string
	db   *sql.DB   // pool for reads
	w    *sql.Conn // the one connection that writes
	emb  Embedder
	cfg  config

	wmu sync.Mutex // serializes writers (transaction + index update)
	// dataVersion is w's PRAGMA data_version when the index was last known
	// to match the file; a different value at the start of a write means
	// another connection (process) committed, so the index is reloaded.
	dataVersion int64 // guarded by wmu

	mu     sync.RWMutex // guards the fields below
	closed bool
	embID  string // recorded embedder ("" until one is known)
	dim    int
	ns     map[string]*nsIndex
}

const sqliteMagic = "SQLite format 3\x00"

// Open opens (creating if needed) the memory database at path. emb may be nil
// for administrative use (stats, list, export, raw-vector Add once an
// embedder is recorded); otherwise it must match the embedder recorded in the
// file, or becomes the recorded one for a new file.
func Open(path string, emb Embedder, opts ...Option) (*Store, error) {
	cfg := config{cap: DefaultCap, busyTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if path == "" {
		return nil, fmt.Errorf("%w: empty database path", ErrInvalid)
	}
	if cfg.cap < 0 {
		return nil, fmt.Errorf("%w: cap %d is negative (0 means no cap)", ErrInvalid, cfg.cap)
	}
	if cfg.readOnly {
		if cfg.capSet {
			return nil, fmt.Errorf("%w: WithCap records the cap in the file; it cannot go with ReadOnly", ErrInvalid)
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("memstore: open read-only: %w", err)
		}
	}
	if emb != nil && (emb.Dim() <= 0 || emb.ID() == "") {
		return nil, fmt.Errorf("%w: embedder %q has dimension %d", ErrInvalid, emb.ID(), emb.Dim())
	}
	if err := checkHeader(path); err != nil {
		return nil, err
	}
	syncMode := "NORMAL"
	if cfg.syncFull {
		syncMode = "FULL"
	}
	dsn := fmt.Sprintf("file:%s?_foreign_keys=on&_busy_timeout=%d&_synchronous=%s&_txlock=immediate&_cache_size=-65536",
		escapePath(path), cfg.busyTimeout.Milliseconds(), syncMode)
	if cfg.readOnly {
		dsn += "&mode=ro"
	}
	s, err := openDSN(path, dsn, emb, cfg)
	if err != nil && cfg.readOnly && isCantOpen(err) {
		// A WAL database in a directory we cannot write, with no -shm file
		// beside it: SQLite can only read it as immutable (no other process
		// can be writing it either, for the same reason).
		s, err = openDSN(path, dsn+"&immutable=1", emb, cfg)
	}
	return s, err
}

func openDSN(path, dsn string, emb Embedder, cfg config) (*Store, error) {
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("memstore: open %s: %w", path, err)
	}
	s := &Store{path: path, db: db, emb: emb, cfg: cfg, ns: map[string]*nsIndex{}}
	if err := s.init(); err != nil {
		if s.w != nil {
			s.w.Close()
		}
		db.Close()
		return nil, fmt.Errorf("memstore: open %s: %w", path, err)
	}
	return s, nil
}

func isCantOpen(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrCantOpen || se.Code == sqlite3.ErrReadonly)
}

// escapePath makes a file path safe inside a SQLite URI.
func escapePath(p string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return r.Replace(p)
}

// checkHeader rejects an existing non-empty file that is not SQLite.
func checkHeader(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	defer f.Close()
	buf := make([]byte, len(sqliteMagic))
	n, err := io.ReadFull(f, buf)
	if n == 0 && (err == io.EOF) {
		return nil // empty file: becomes a new database
	}
	if err != nil || !bytes.Equal(buf, []byte(sqliteMagic)) {
		return fmt.Errorf("%w: %s is not a SQLite database", ErrNotStore, path)
	}
	return nil
}

// classify maps SQLite's corruption errors to the typed ones.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrNotADB:
			return fmt.Errorf("%w: %v", ErrNotStore, err)
		case sqlite3.ErrCorrupt:
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	return err
}

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

// Close closes the database; it is idempotent.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.ns = nil
	s.mu.Unlock()
	err := s.w.Close()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Embedder returns the recorded embedder identity and dimension ("" and 0
// when none is recorded yet).
func (s *Store) Embedder() (id string, dim int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.embID, s.dim
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

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

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

// Namespaces lists the namespace names, sorted.
func (s *Store) Namespaces() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.ns))
	for n := range s.ns {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// SetEmbedder attaches emb to a store opened without one (or replaces an
// equal one). It must match the recorded embedder (ErrEmbedderMismatch);
// a store with none recorded records it.
func (s *Store) SetEmbedder(emb Embedder) error {
	if emb == nil || emb.Dim() <= 0 || emb.ID() == "" {
		return fmt.Errorf("%w: nil or dimensionless embedder", ErrInvalid)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	id, dim := s.Embedder()
	if id == "" {
		// Recorded insert-if-absent in one transaction: another process
		// may be recording its own right now.
		if err := s.claimEmbedder(context.Background(), emb.ID(), emb.Dim()); err != nil {
			return err
		}
	} else if id != emb.ID() || dim != emb.Dim() {
		return fmt.Errorf("%w: store built with %q (dim %d), given %q (dim %d)", ErrEmbedderMismatch, id, dim, emb.ID(), emb.Dim())
	}
	s.mu.Lock()
	s.emb = emb
	s.mu.Unlock()
	return nil
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
