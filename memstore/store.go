package memstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

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

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
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
