package memstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vecEmb is a test embedder of a small dimension for tests that pass raw
// vectors; it embeds a text as a one-hot vector on its length.
type vecEmb struct {
	id  string
	dim int
}

func (v vecEmb) ID() string { return v.id }
func (v vecEmb) Dim() int   { return v.dim }
func (v vecEmb) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = make([]float32, v.dim)
		out[i][len(t)%v.dim] = 1
	}
	return out, nil
}

// at returns a 4-d unit vector whose cosine with e0 is c.
func at(c float64) []float32 {
	return []float32{float32(c), float32(math.Sqrt(1 - c*c)), 0, 0}
}

var e0 = []float32{1, 0, 0, 0}

func openT(t *testing.T, path string, emb Embedder, opts ...Option) *Store {
	t.Helper()
	s, err := Open(path, emb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func contents(ms []Match) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Content
	}
	return out
}

func TestThresholdOrderAndCount(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), vecEmb{"t/4", 4})
	_, err := s.Add(ctx, "boil/0", []Entry{
		{Content: "c1.0", Score: 10, Embedding: at(1)},
		{Content: "c0.8", Score: 90, Embedding: at(0.8)},
		{Content: "c0.6", Score: 50, Embedding: at(0.6)},
		{Content: "c0.51", Score: 70, Embedding: at(0.51)},
		{Content: "c0.49", Score: 100, Embedding: at(0.49)}, // below the threshold
		{Content: "c0.2", Score: 100, Embedding: at(0.2)},
		{Content: "c-1", Score: 100, Embedding: []float32{-2, 0, 0, 0}}, // not normalized on input
	})
	require.NoError(t, err)
	// Another namespace must not leak in.
	_, err = s.Add(ctx, "boil/1", []Entry{{Content: "other", Score: 1000, Embedding: at(1)}})
	require.NoError(t, err)

	r, err := s.Retrieve(ctx, "boil/0", []float32{3, 0, 0, 0}, DefaultQuery())
	require.NoError(t, err)
	assert.Equal(t, 4, r.Count)
	assert.Equal(t, []string{"c0.8", "c0.51", "c0.6", "c1.0"}, contents(r.Entries))
	assert.InDelta(t, 0.8, r.Entries[0].Similarity, 1e-6)

	r, err = s.Retrieve(ctx, "boil/0", e0, Query{K: 2, Threshold: DefaultThreshold})
	require.NoError(t, err)
	assert.Equal(t, 4, r.Count, "Count counts every match, not only the top K")
	assert.Equal(t, []string{"c0.8", "c0.51"}, contents(r.Entries))

	r, err = s.Retrieve(ctx, "boil/0", e0, Query{K: DefaultK, Order: OrderBySimilarity, Threshold: DefaultThreshold})
	require.NoError(t, err)
	assert.Equal(t, []string{"c1.0", "c0.8", "c0.6", "c0.51"}, contents(r.Entries))

	r, err = s.Retrieve(ctx, "boil/0", e0, Query{K: DefaultK, Threshold: 0.1, Order: OrderBySimilarity})
	require.NoError(t, err)
	assert.Equal(t, 6, r.Count)
	assert.Equal(t, "c0.2", r.Entries[5].Content)

	r, err = s.Retrieve(ctx, "boil/0", e0, Query{Threshold: -1.5, K: 100})
	require.NoError(t, err)
	assert.Equal(t, 7, r.Count)

	// Large K takes the sort path; it must agree with the small-K path.
	big, err := s.Retrieve(ctx, "boil/0", e0, Query{K: 1000, Threshold: DefaultThreshold})
	require.NoError(t, err)
	assert.Equal(t, []string{"c0.8", "c0.51", "c0.6", "c1.0"}, contents(big.Entries))

	r, err = s.Retrieve(ctx, "nope", e0, DefaultQuery())
	require.NoError(t, err)
	assert.Equal(t, 0, r.Count)
	assert.Empty(t, r.Entries)

	_, err = s.Retrieve(ctx, "boil/0", []float32{1, 0, 0}, DefaultQuery())
	assert.ErrorIs(t, err, ErrDimMismatch)
}

func TestSmallKAgreesWithSort(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), vecEmb{"t/4", 4}, WithCap(0))
	var es []Entry
	for i := 0; i < 300; i++ {
		c := math.Cos(float64(i) * 0.01)
		es = append(es, Entry{Content: fmt.Sprint("e", i), Score: float64((i * 37) % 11), Embedding: at(c)})
	}
	_, err := s.Add(ctx, "n", es)
	require.NoError(t, err)
	for _, o := range []Order{OrderByScore, OrderBySimilarity} {
		small, err := s.Retrieve(ctx, "n", e0, Query{K: 50, Order: o, Threshold: DefaultThreshold})
		require.NoError(t, err)
		all, err := s.Retrieve(ctx, "n", e0, Query{K: 300, Order: o, Threshold: DefaultThreshold})
		require.NoError(t, err)
		assert.Equal(t, all.Count, small.Count)
		assert.Equal(t, contents(all.Entries[:50]), contents(small.Entries))
	}
}

func TestDedupe(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), NewHashEmbedder(64))
	n, err := s.Add(ctx, "a", []Entry{{Content: "tip one"}, {Content: "tip two"}, {Content: "tip one"}})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = s.Add(ctx, "a", []Entry{{Content: "tip two", Score: 5}, {Content: "tip three"}})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	// Same content in another namespace is not a duplicate.
	n, err = s.Add(ctx, "b", []Entry{{Content: "tip one"}})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 4, st.Entries)
	assert.Equal(t, 3, st.Namespaces[0].Count)
}

func TestEvictionOldestFirst(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openT(t, path, NewHashEmbedder(32), WithCap(5))
	for i := 0; i < 8; i++ {
		_, err := s.Add(ctx, "n", []Entry{{Content: fmt.Sprint("tip ", i)}})
		require.NoError(t, err)
	}
	list := func(s *Store) []string {
		es, err := s.List(ctx, "n", 0)
		require.NoError(t, err)
		var out []string
		for _, e := range es {
			out = append(out, e.Content)
		}
		return out
	}
	assert.Equal(t, []string{"tip 7", "tip 6", "tip 5", "tip 4", "tip 3"}, list(s))
	// A batch larger than the cap keeps its own newest entries.
	var batch []Entry
	for i := 10; i < 17; i++ {
		batch = append(batch, Entry{Content: fmt.Sprint("tip ", i)})
	}
	n, err := s.Add(ctx, "n", batch)
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	want := []string{"tip 16", "tip 15", "tip 14", "tip 13", "tip 12"}
	assert.Equal(t, want, list(s))
	// Retrieval sees exactly the survivors.
	r, err := s.Retrieve(ctx, "n", make([]float32, 32), DefaultQuery())
	require.NoError(t, err)
	assert.Equal(t, 0, r.Count, "a zero query matches nothing")
	r, err = s.RetrieveText(ctx, "n", "tip", Query{Threshold: -1, K: 100})
	require.NoError(t, err)
	assert.Equal(t, 5, r.Count)
	// The database agrees with memory after reopening.
	require.NoError(t, s.Close())
	s2 := openT(t, path, NewHashEmbedder(32), WithCap(5))
	assert.Equal(t, want, list(s2))
}

func TestReopenAndEmbedderMismatch(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openT(t, path, NewHashEmbedder(0))
	_, err := s.Add(ctx, "ns", []Entry{{Content: "open the door to the kitchen", Key: "you are in the hallway", Score: 42, Step: 3, Episode: "ep-1"}})
	require.NoError(t, err)
	before, err := s.RetrieveText(ctx, "ns", "you are in the hallway", DefaultQuery())
	require.NoError(t, err)
	require.Len(t, before.Entries, 1)
	assert.InDelta(t, 1, before.Entries[0].Similarity, 1e-5)

	_, err = s.Add(ctx, "ns", []Entry{{Content: "x", Embedding: make([]float32, 10)}})
	assert.ErrorIs(t, err, ErrDimMismatch)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = s.Add(ctx, "ns", []Entry{{Content: "y"}})
	assert.ErrorIs(t, err, ErrClosed)
	_, err = s.Retrieve(ctx, "ns", make([]float32, DefaultDim), DefaultQuery())
	assert.ErrorIs(t, err, ErrClosed)

	_, err = Open(path, NewHashEmbedder(128))
	assert.ErrorIs(t, err, ErrEmbedderMismatch)
	_, err = Open(path, vecEmb{"other/384", 384})
	assert.ErrorIs(t, err, ErrEmbedderMismatch)

	s2 := openT(t, path, NewHashEmbedder(DefaultDim))
	after, err := s2.RetrieveText(ctx, "ns", "you are in the hallway", DefaultQuery())
	require.NoError(t, err)
	assert.Equal(t, before, after)
	e := after.Entries[0]
	assert.Equal(t, int64(3), e.Step)
	assert.Equal(t, "ep-1", e.Episode)
	assert.Equal(t, 42.0, e.Score)

	// Without an embedder: admin use works, text use is refused.
	s3 := openT(t, path, nil)
	id, dim := s3.Embedder()
	assert.Equal(t, "hash-ngram-v1/384", id)
	assert.Equal(t, DefaultDim, dim)
	_, err = s3.RetrieveText(ctx, "ns", "q", DefaultQuery())
	assert.ErrorIs(t, err, ErrNoEmbedder)
	_, err = s3.Add(ctx, "ns", []Entry{{Content: "z"}})
	assert.ErrorIs(t, err, ErrNoEmbedder)
	r, err := s3.Retrieve(ctx, "ns", s2Vec(t, "you are in the hallway"), DefaultQuery())
	require.NoError(t, err)
	assert.Equal(t, 1, r.Count)

	// A fresh store opened without an embedder cannot take raw vectors.
	s4 := openT(t, filepath.Join(t.TempDir(), "fresh.db"), nil)
	_, err = s4.Add(ctx, "ns", []Entry{{Content: "z", Embedding: make([]float32, 4)}})
	assert.ErrorIs(t, err, ErrNoEmbedder)
}

func s2Vec(t *testing.T, text string) []float32 {
	v, err := NewHashEmbedder(DefaultDim).Embed(context.Background(), []string{text})
	require.NoError(t, err)
	return v[0]
}

func TestInvalidInput(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), vecEmb{"t/4", 4})
	_, err := s.Add(ctx, "", []Entry{{Content: "a"}})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = s.Add(ctx, "n", []Entry{{Content: ""}})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = s.Add(ctx, "n", []Entry{{Content: "a", Embedding: []float32{float32(math.NaN()), 0, 0, 0}}})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = s.Add(ctx, "n", []Entry{{Content: "a", Score: math.Inf(1)}})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = s.Prune(ctx, PruneOptions{})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = Open("", nil)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestForeignCorruptAndNewer(t *testing.T) {
	dir := t.TempDir()
	// Not SQLite at all.
	txt := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(txt, []byte("hello, these are not tips\n"), 0o644))
	_, err := Open(txt, nil)
	assert.ErrorIs(t, err, ErrNotStore)

	// SQLite of another program.
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite3", other)
	require.NoError(t, err)
	_, err = db.Exec("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = Open(other, nil)
	assert.ErrorIs(t, err, ErrNotStore)

	// Written by a newer empo2.
	newer := filepath.Join(dir, "newer.db")
	s, err := Open(newer, NewHashEmbedder(16))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	db, err = sql.Open("sqlite3", newer)
	require.NoError(t, err)
	_, err = db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = Open(newer, NewHashEmbedder(16))
	assert.ErrorIs(t, err, ErrSchemaTooNew)

	// A store whose pages are overwritten with garbage.
	bad := filepath.Join(dir, "bad.db")
	s, err = Open(bad, NewHashEmbedder(64), WithCap(0))
	require.NoError(t, err)
	var es []Entry
	for i := 0; i < 2000; i++ {
		es = append(es, Entry{Content: fmt.Sprintf("tip number %d about the stove", i)})
	}
	_, err = s.Add(context.Background(), "n", es)
	require.NoError(t, err)
	require.NoError(t, s.Close()) // checkpoints the WAL into the main file
	raw, err := os.ReadFile(bad)
	require.NoError(t, err)
	require.Greater(t, len(raw), 64*1024)
	for i := 4096; i < len(raw); i++ { // keep page 1 (header, schema), ruin the rest
		raw[i] = byte(i*7 + 3)
	}
	require.NoError(t, os.WriteFile(bad, raw, 0o644))
	_, err = Open(bad, NewHashEmbedder(64))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrCorrupt, "got %v", err)
}

func TestPruneAndReset(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openT(t, path, NewHashEmbedder(32))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, ns := range []string{"a", "b"} {
		var es []Entry
		for i := 0; i < 10; i++ {
			es = append(es, Entry{Content: fmt.Sprint(ns, i), Score: float64(i * 10), Created: t0.Add(time.Duration(i) * time.Hour)})
		}
		_, err := s.Add(ctx, ns, es)
		require.NoError(t, err)
	}
	n, err := s.Prune(ctx, PruneOptions{Namespace: "a", Keep: 6})
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	low := 30.0
	n, err = s.Prune(ctx, PruneOptions{BelowScore: &low}) // a: none left below 40; b: 0,10,20
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	n, err = s.Prune(ctx, PruneOptions{Namespace: "b", Before: t0.Add(5 * time.Hour)}) // b3, b4
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, st.Namespaces, 2)
	assert.Equal(t, 6, st.Namespaces[0].Count)
	assert.Equal(t, 5, st.Namespaces[1].Count)
	assert.Equal(t, 50.0, st.Namespaces[1].MinScore)
	assert.Equal(t, t0.Add(9*time.Hour), st.Namespaces[1].Newest)

	n, err = s.Reset(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, 6, n)
	assert.Equal(t, []string{"b"}, s.Namespaces())
	require.NoError(t, s.Close())

	// Reset of everything forgets the embedder binding.
	s2 := openT(t, path, nil)
	n, err = s2.Reset(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	id, _ := s2.Embedder()
	assert.Equal(t, "", id)
	require.NoError(t, s2.Close())
	s3 := openT(t, path, NewHashEmbedder(16)) // a different embedder is now accepted
	st, err = s3.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, st.Entries)
	assert.Equal(t, "hash-ngram-v1/16", st.Embedder)
	require.NoError(t, s3.Check(ctx))
}

func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := openT(t, filepath.Join(dir, "src.db"), NewHashEmbedder(48))
	_, err := src.Add(ctx, "boil/3", []Entry{
		{Content: "heat the water on the stove", Key: "kitchen stove pot water", Score: 80, Step: 1, Episode: "e1"},
		{Content: "focus on the thermometer", Key: "hallway thermometer", Score: -20, Step: 2, Episode: "e1"},
	})
	require.NoError(t, err)
	_, err = src.Add(ctx, "melt/0", []Entry{{Content: "put ice in the pot", Score: 10}})
	require.NoError(t, err)
	var buf strings.Builder
	n, err := src.Export(ctx, &buf, "")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, 3, strings.Count(buf.String(), "\n"))

	dst := openT(t, filepath.Join(dir, "dst.db"), nil) // adopts the file's embedder
	ist, err := dst.Import(ctx, strings.NewReader(buf.String()))
	require.NoError(t, err)
	assert.Equal(t, ImportStats{Read: 3, Added: 3}, ist)
	id, dim := dst.Embedder()
	assert.Equal(t, "hash-ngram-v1/48", id)
	assert.Equal(t, 48, dim)
	ist, err = dst.Import(ctx, strings.NewReader(buf.String()))
	require.NoError(t, err)
	assert.Equal(t, ImportStats{Read: 3, Added: 0}, ist, "re-import is deduplicated")

	q := s2VecDim(t, "kitchen stove pot water", 48)
	a, err := src.Retrieve(ctx, "boil/3", q, Query{K: DefaultK, Threshold: -1})
	require.NoError(t, err)
	b, err := dst.Retrieve(ctx, "boil/3", q, Query{K: DefaultK, Threshold: -1})
	require.NoError(t, err)
	require.Equal(t, len(a.Entries), len(b.Entries))
	for i := range a.Entries {
		assert.Equal(t, a.Entries[i].Content, b.Entries[i].Content)
		assert.Equal(t, a.Entries[i].Similarity, b.Entries[i].Similarity)
		assert.Equal(t, a.Entries[i].Created, b.Entries[i].Created)
		assert.Equal(t, a.Entries[i].Step, b.Entries[i].Step)
	}

	// Foreign embedder and bad lines are refused.
	other := openT(t, filepath.Join(dir, "other.db"), NewHashEmbedder(16))
	_, err = other.Import(ctx, strings.NewReader(buf.String()))
	assert.ErrorIs(t, err, ErrEmbedderMismatch)
	_, err = other.Import(ctx, strings.NewReader("{\"namespace\":\"x\"}\n"))
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = other.Import(ctx, strings.NewReader("not json\n"))
	assert.ErrorIs(t, err, ErrInvalid)
	// Records without embeddings are embedded with the store's embedder.
	ist, err = other.Import(ctx, strings.NewReader(`{"namespace":"x","content":"a hand-written tip","score":3}`+"\n"))
	require.NoError(t, err)
	assert.Equal(t, 1, ist.Added)
	st, err := other.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Entries)
}

func s2VecDim(t *testing.T, text string, dim int) []float32 {
	v, err := NewHashEmbedder(dim).Embed(context.Background(), []string{text})
	require.NoError(t, err)
	return v[0]
}

func TestMigrationMarksFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	s := openT(t, path, NewHashEmbedder(8))
	require.NoError(t, s.Close())
	db, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	defer db.Close()
	var app, ver int
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA application_id").Scan(&app))
	require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&ver))
	require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	assert.Equal(t, appID, app)
	assert.Equal(t, SchemaVersion, ver)
	assert.Equal(t, "wal", mode)
	// An empty file (e.g. from touch) becomes a store.
	empty := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	s2, err := Open(empty, NewHashEmbedder(8))
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	require.True(t, errors.Is(fmt.Errorf("x: %w", ErrCorrupt), ErrCorrupt))
}

func TestSetEmbedderAndBuiltin(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openT(t, path, nil)
	_, err := s.RetrieveText(ctx, "n", "x", DefaultQuery())
	assert.ErrorIs(t, err, ErrNoEmbedder)
	require.NoError(t, s.SetEmbedder(NewHashEmbedder(24)))
	_, err = s.Add(ctx, "n", []Entry{{Content: "a tip about the stove"}})
	require.NoError(t, err)
	assert.ErrorIs(t, s.SetEmbedder(NewHashEmbedder(25)), ErrEmbedderMismatch)
	assert.ErrorIs(t, s.SetEmbedder(nil), ErrInvalid)
	r, err := s.RetrieveText(ctx, "n", "a tip about the stove", DefaultQuery())
	require.NoError(t, err)
	assert.Equal(t, 1, r.Count)

	e, ok := BuiltinEmbedder("hash-ngram-v1/24")
	require.True(t, ok)
	assert.Equal(t, 24, e.Dim())
	for _, id := range []string{"hash-ngram-v1/0", "hash-ngram-v1/024", "llama:qwen2:x:1p:8d:mean", "hash-ngram-v2/24", ""} {
		_, ok := BuiltinEmbedder(id)
		assert.False(t, ok, id)
	}
}

func TestForeignFileUntouched(t *testing.T) {
	other := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite3", other)
	require.NoError(t, err)
	_, err = db.Exec("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(other)
	require.NoError(t, err)
	_, err = Open(other, NewHashEmbedder(8))
	require.ErrorIs(t, err, ErrNotStore)
	after, err := os.ReadFile(other)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a foreign database must not be modified")
	_, err = os.Stat(other + "-wal")
	assert.True(t, os.IsNotExist(err), "no WAL left beside a foreign database")
}

// TestConcurrentOpenNewFile opens one new file from several goroutines at
// once (separate Stores, as separate processes would): exactly one migrates,
// all succeed.
func TestConcurrentOpenNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		go func() {
			s, err := Open(path, NewHashEmbedder(8))
			if err == nil {
				_, err = s.Add(context.Background(), "n", []Entry{{Content: "same tip"}})
				if cerr := s.Close(); err == nil {
					err = cerr
				}
			}
			errs <- err
		}()
	}
	for i := 0; i < 6; i++ {
		assert.NoError(t, <-errs)
	}
	s := openT(t, path, NewHashEmbedder(8))
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Entries)
}

// TestTwoStoresOneFile: a second Store (as another process would) writes
// the same namespace; the first one's next Add notices its stale index and
// reloads, and the file obeys the cap throughout.
func TestTwoStoresOneFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	a := openT(t, path, NewHashEmbedder(16), WithCap(5))
	b := openT(t, path, NewHashEmbedder(16), WithCap(5))
	add := func(s *Store, c string) {
		_, err := s.Add(ctx, "n", []Entry{{Content: c}})
		require.NoError(t, err)
	}
	for i := 0; i < 4; i++ {
		add(a, fmt.Sprint("a", i))
		add(b, fmt.Sprint("b", i))
	}
	add(a, "a-last")
	es, err := a.List(ctx, "n", 0)
	require.NoError(t, err)
	var got []string
	for _, e := range es {
		got = append(got, e.Content)
	}
	assert.Equal(t, []string{"a-last", "b3", "a3", "b2", "a2"}, got)
	// Reset by one, re-created by the other, then used again by the first.
	_, err = b.Reset(ctx, "n")
	require.NoError(t, err)
	add(b, "fresh")
	add(a, "again")
	es, err = a.List(ctx, "n", 0)
	require.NoError(t, err)
	require.Len(t, es, 2)
	assert.Equal(t, "again", es[0].Content)
	assert.Equal(t, "fresh", es[1].Content)
}

func TestCapIsRecorded(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	add := func(s *Store, n int) {
		for i := 0; i < n; i++ {
			_, err := s.Add(ctx, "n", []Entry{{Content: fmt.Sprint("tip ", time.Now().UnixNano(), i)}})
			require.NoError(t, err)
		}
	}
	count := func(s *Store) int {
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		return st.Entries
	}
	s, err := Open(path, NewHashEmbedder(8), WithCap(3))
	require.NoError(t, err)
	add(s, 5)
	assert.Equal(t, 3, count(s))
	require.NoError(t, s.Close())

	s, err = Open(path, nil) // no WithCap: the recorded 3 applies
	require.NoError(t, err)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Cap)
	require.NoError(t, s.Close())

	s, err = Open(path, NewHashEmbedder(8), WithCap(0)) // no cap, recorded
	require.NoError(t, err)
	add(s, 4)
	assert.Equal(t, 7, count(s))
	require.NoError(t, s.Close())
	s = openT(t, path, NewHashEmbedder(8))
	add(s, 1)
	assert.Equal(t, 8, count(s), "an open without WithCap must not evict")

	fresh := openT(t, filepath.Join(t.TempDir(), "f.db"), nil)
	st, err = fresh.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, DefaultCap, st.Cap)
}

func TestRetrieveTextsMatchesOneByOne(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), NewHashEmbedder(64))
	for _, ns := range []string{"a", "b"} {
		_, err := s.Add(ctx, ns, []Entry{
			{Content: ns + ": heat the water", Score: 3},
			{Content: ns + ": open the door", Score: 9},
			{Content: ns + ": water the plant", Score: 5},
		})
		require.NoError(t, err)
	}
	qs := []TextQuery{{"a", "a: heat the water"}, {"b", "b: water"}, {"missing", "x"}, {"a", "door"}}
	got, err := s.RetrieveTexts(ctx, qs, Query{K: DefaultK, Threshold: 0.2})
	require.NoError(t, err)
	require.Len(t, got, len(qs))
	for i, tq := range qs {
		want, err := s.RetrieveText(ctx, tq.Namespace, tq.Text, Query{K: DefaultK, Threshold: 0.2})
		require.NoError(t, err)
		assert.Equal(t, want, got[i], "query %d", i)
	}
	assert.NotZero(t, got[0].Count)
	assert.Zero(t, got[2].Count)
}
