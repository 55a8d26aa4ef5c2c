package memstore

import "errors"

// Sentinel errors; functions wrap them with %w and context.
var (
	// ErrNotStore: the file is not a SQLite database, or it is one made by
	// another program (unknown application_id or foreign tables).
	ErrNotStore = errors.New("memstore: not an empo2 memory database")
	// ErrCorrupt: the file is an empo2 memory database but its content is
	// damaged (SQLite reports corruption, or a row is inconsistent).
	ErrCorrupt = errors.New("memstore: database is corrupt")
	// ErrSchemaTooNew: the file was written by a newer empo2 (higher user_version).
	ErrSchemaTooNew = errors.New("memstore: database schema is newer than this program")
	// ErrEmbedderMismatch: the embedder differs from the one the store was built with.
	ErrEmbedderMismatch = errors.New("memstore: embedder differs from the store's")
	// ErrDimMismatch: a vector's dimension differs from the store's.
	ErrDimMismatch = errors.New("memstore: vector dimension differs from the store's")
	// ErrNoEmbedder: text must be embedded but the store was opened without an
	// embedder, or a vector was given before any embedder was recorded.
	ErrNoEmbedder = errors.New("memstore: no embedder")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("memstore: store is closed")
	// ErrReadOnly: a write to a store opened with ReadOnly.
	ErrReadOnly = errors.New("memstore: store is opened read-only")
	// ErrNoIndex: a retrieval from a store opened WithoutIndex.
	ErrNoIndex = errors.New("memstore: store is opened without its vector index")
	// ErrInvalid: an argument is invalid (empty namespace or content, bad JSONL, ...).
	ErrInvalid = errors.New("memstore: invalid argument")
)
