// Package memstore is the agent's memory of self-written tips for EMPO²: a
// SQLite file (mattn/go-sqlite3) holding, per namespace (a task variation),
// entries made of an embedding key, a tip text, a score, the training step and
// the episode that wrote it.
//
// Semantics follow the EMPO² reference: exact-duplicate contents are skipped
// per namespace; a namespace holds at most Cap entries (default 1000) and the
// oldest (lowest id) are evicted first; Retrieve returns the entries whose
// cosine similarity to the query is > Threshold (default 0.5), ordered by
// score descending (or by similarity with OrderBySimilarity), top K (default
// 10), together with Count, the number of entries above the threshold.
// Result.IntrinsicReward is 1/(len(Entries)+1).
//
// Conventions:
//   - Open(path, emb, opts...) creates or opens one database file (WAL,
//     foreign keys, busy timeout, schema versioned by PRAGMA user_version and
//     marked by PRAGMA application_id). A file that is not a SQLite database,
//     or a SQLite database of another program, gives ErrNotStore; a damaged one
//     ErrCorrupt; a newer schema ErrSchemaTooNew.
//   - Embedders satisfy the Embedder interface structurally. The store records
//     the embedder ID and dimension of the first embedder it sees and refuses
//     any other with ErrEmbedderMismatch (also ErrDimMismatch for raw vectors
//     of the wrong size). HashEmbedder is the built-in, model-free default.
//   - Each namespace keeps a contiguous, L2-normalized float32 matrix in RAM,
//     loaded on Open and updated after every commit, so retrieval never touches
//     SQL. Reads run concurrently (RWMutex per namespace); writes are
//     serialized and committed one transaction per Add/Import call, so a crash
//     loses at most the batch in flight. Only one process should write a
//     file at a time: another process's writes are not seen until reopening.
//   - Errors are typed sentinels wrapped with %w; test with errors.Is.
package memstore
