package memstore

// appID marks empo2 memory databases (PRAGMA application_id): "EMP2".
const appID = 0x454d5032

// migrations[i] takes the schema from user_version i to i+1. Append only:
// never edit a released step.
var migrations = []string{
	// 0 -> 1: namespaces, entries, meta (embedder binding).
	`CREATE TABLE meta (
		key   TEXT PRIMARY KEY,
		value TEXT NOT NULL
	) STRICT;
	CREATE TABLE namespaces (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		name       TEXT NOT NULL UNIQUE,
		created_at INTEGER NOT NULL
	) STRICT;
	CREATE TABLE entries (
		id           INTEGER PRIMARY KEY AUTOINCREMENT,
		namespace_id INTEGER NOT NULL REFERENCES namespaces(id) ON DELETE CASCADE,
		content      TEXT NOT NULL,
		content_hash BLOB NOT NULL,
		score        REAL NOT NULL,
		step         INTEGER NOT NULL,
		episode      TEXT NOT NULL,
		created_at   INTEGER NOT NULL,
		embedder     TEXT NOT NULL,
		dim          INTEGER NOT NULL,
		embedding    BLOB NOT NULL,
		UNIQUE (namespace_id, content_hash)
	) STRICT;
	CREATE INDEX entries_by_namespace ON entries(namespace_id, id);`,
	// 1 -> 2: a covering index for Stats (count, score and time range per
	// namespace), so that it never reads the rows and their embeddings.
	`CREATE INDEX entries_meta ON entries(namespace_id, score, created_at);`,
}

// SchemaVersion is the user_version this program writes.
var SchemaVersion = len(migrations)
