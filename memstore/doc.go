// Package memstore is the agent's memory of self-written tips for EMPO²: a
// SQLite file (mattn/go-sqlite3) holding, per namespace (a task variation),
// entries made of an embedding key, a tip text, a score, the training step and
// the episode that wrote it.
//
// Semantics follow the EMPO² reference: exact-duplicate contents are skipped
// per namespace; a namespace holds at most Cap entries (default 1000; WithCap
// records it in the file, later opens without WithCap use the recorded one) and the
// oldest (lowest id) are evicted first; Retrieve returns the entries whose
// cosine similarity to the query is > Threshold (default 0.5), ordered by
// score descending (or by similarity with OrderBySimilarity), top K (default
// 10), together with Count, the number of entries above the threshold.
// Result.Count (every match above the threshold) is what the trainer's
// exploration bonus 1/(Count+1) counts (algo.IntrinsicReward).
//
// API: Open(path, emb, WithCap/WithBusyTimeout/WithSyncFull/ReadOnly/
// WithoutIndex) → *Store (ReadOnly: SQLite mode=ro, immutable when the
// directory cannot hold the WAL's -shm, writes give ErrReadOnly;
// WithoutIndex: no embedding is read, Retrieve gives ErrNoIndex);
// Add(ctx, ns, []Entry) (added, err) (Entry.Embedding, else the embedding
// of Entry.Key, else of Entry.Content); Retrieve(ctx, ns, vec, Query) and
// RetrieveText(ctx, ns, text, Query) → Result{Entries, Count} (RetrieveTexts
// embeds many queries in one call); Stats, List,
// Namespaces, Prune (DryRun counts), Reset, Export/Import/ImportWith (JSONL
// Records), Check (integrity),
// SetEmbedder, Close (idempotent). NewHashEmbedder(dim) is the built-in
// embedder; BuiltinEmbedder(id) rebuilds it from a recorded ID.
// Administration as `empo2 memory` does it (files.go): OpenFile(path,
// Access) (create, write, read, meta-only; ErrNoDatabase), Files and
// RemoveFiles (the database and SQLite's companion files),
// AttachEmbedder, SearchQuery, ParseBefore, PrepareImport and ImportFiles.
// Files by role: store.go (types, options, Open/Close), load.go (schema,
// recorded embedder and cap, index loading), write.go (Add), retrieve.go
// (Query, Retrieve*), admin.go (Stats, List, Prune, Reset, Export/Import),
// files.go (administration of a file). The store
// knows nothing of prompts: the EMPO² tip-writing side (tip requests, the
// tip block, intrinsic reward) lives in package trainer.
//
// Conventions:
//   - One database file: WAL, foreign keys, busy timeout, schema versioned by
//     PRAGMA user_version (append-only migrations in schema.go) and marked by
//     PRAGMA application_id. A file that is not SQLite, or a SQLite database of
//     another program (left untouched), gives ErrNotStore; a damaged one
//     ErrCorrupt; a newer schema ErrSchemaTooNew.
//   - Embedders satisfy Embedder structurally (the llama package's does). The
//     store records the embedder ID and dimension of the first embedder it
//     sees and refuses any other with ErrEmbedderMismatch (ErrDimMismatch for
//     raw vectors of the wrong size); ErrNoEmbedder when text must be embedded
//     but the store was opened with nil.
//   - Each namespace keeps a contiguous, L2-normalized float32 matrix in RAM,
//     loaded on Open and updated after every commit, so retrieval never touches
//     SQL; the scan uses an AVX2/FMA kernel on amd64 (pure Go elsewhere).
//     Reads run concurrently (RWMutex per namespace); writes are serialized and
//     committed one transaction per Add/Import call, so a crash loses at most
//     the batch in flight. Several processes may share a file: every write
//     goes through one connection whose PRAGMA data_version reveals other
//     writers' commits, and the index is then reloaded; until this Store
//     writes (or is reopened), its reads do not see other processes' writes.
//   - Errors are typed sentinels wrapped with %w; test with errors.Is.
package memstore
