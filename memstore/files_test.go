package memstore

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// OpenFile creates a database only with AccessCreate; read accesses are
// read-only; a failed command's new database is removed with its files.
func TestOpenFileAccess(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	for _, a := range []Access{AccessWrite, AccessRead, AccessMetaOnly} {
		_, err := OpenFile(path, a)
		require.ErrorIs(t, err, ErrNoDatabase)
		assert.False(t, FileExists(path))
	}
	_, err := OpenFile(" ", AccessCreate)
	require.ErrorIs(t, err, ErrInvalid)
	s, err := OpenFile(path, AccessCreate)
	require.NoError(t, err)
	require.NoError(t, s.AttachEmbedder(nil, 0, true))
	id, dim := s.Embedder()
	assert.Equal(t, NewHashEmbedder(DefaultDim).ID(), id)
	assert.Equal(t, DefaultDim, dim)
	_, err = s.Add(ctx, "a", []Entry{{Content: "heat the pot"}})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	r, err := OpenFile(path, AccessRead)
	require.NoError(t, err)
	require.NoError(t, r.AttachEmbedder(nil, 0, false)) // the recorded built-in one
	_, err = r.Add(ctx, "a", []Entry{{Content: "x"}})
	assert.ErrorIs(t, err, ErrReadOnly)
	q, err := SearchQuery(3, 0, false)
	require.NoError(t, err)
	res, err := r.RetrieveText(ctx, "a", "heat the pot", q)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Count)
	require.NoError(t, r.Close())

	assert.Equal(t, []string{path, path + "-wal", path + "-shm", path + "-journal"}, Files(path))
	assert.Nil(t, Files(""))
	RemoveFiles(path)
	for _, p := range Files(path) {
		assert.False(t, FileExists(p), p)
	}
}

// A database built with a model's embedder needs that model.
func TestAttachEmbedderForeign(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := Open(path, fakeEmbedder{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	s, err = OpenFile(path, AccessRead)
	require.NoError(t, err)
	defer s.Close()
	err = s.AttachEmbedder(nil, 0, false)
	require.ErrorIs(t, err, ErrNoEmbedder)
	assert.Contains(t, err.Error(), "fake/4")
}

type fakeEmbedder struct{}

func (fakeEmbedder) ID() string { return "fake/4" }
func (fakeEmbedder) Dim() int   { return 4 }
func (fakeEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range texts {
		out[i] = []float32{1, 0, 0, 0}
	}
	return out, nil
}

// SearchQuery checks k and the threshold; 0 means "> 0".
func TestSearchQuery(t *testing.T) {
	q, err := SearchQuery(2, 0, true)
	require.NoError(t, err)
	assert.Equal(t, float32(math.SmallestNonzeroFloat32), q.Threshold)
	assert.Equal(t, OrderBySimilarity, q.Order)
	q, err = SearchQuery(2, 0.3, false)
	require.NoError(t, err)
	assert.Equal(t, OrderByScoreStable, q.Order)
	for _, tc := range []struct {
		k    int
		thr  float64
		want string
	}{{0, 0.5, "k 0: want a positive number"}, {1, 1.5, "threshold 1.5"}, {1, math.NaN(), "threshold NaN"}} {
		_, err := SearchQuery(tc.k, tc.thr, false)
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), tc.want), err.Error())
	}
}

// ParseBefore takes a positive age or a past time.
func TestParseBefore(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	got, err := ParseBefore("72h", now)
	require.NoError(t, err)
	assert.Equal(t, now.Add(-72*time.Hour), got)
	got, err = ParseBefore("2025-12-31T00:00:00Z", now)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC), got)
	for _, b := range []string{"0s", "-1h", "2027-01-01T00:00:00Z", "yesterday"} {
		_, err := ParseBefore(b, now)
		assert.Error(t, err, b)
	}
}

// ImportFiles adds every file's records in order; a new database without
// an embedder embeds them with the default hash embedder; errors name
// the file.
func TestImportFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.jsonl"), []byte(`{"namespace":"a","content":"one"}`+"\n"+`{"namespace":"a","content":"two"}`+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.jsonl"), []byte(`{"namespace":"b","content":"three"}`+"\n"), 0o644))

	s, err := OpenFile(filepath.Join(dir, "new.db"), AccessCreate)
	require.NoError(t, err)
	defer s.Close()
	opt, err := s.PrepareImport(nil, 0)
	require.NoError(t, err)
	require.NotNil(t, opt.DefaultEmbedder)
	var wrapped []string
	st, err := s.ImportFiles(ctx, []string{filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")}, opt,
		func(r io.Reader, size int64, p string) (io.Reader, func()) {
			wrapped = append(wrapped, filepath.Base(p))
			return r, func() {}
		})
	require.NoError(t, err)
	assert.Equal(t, ImportStats{Read: 3, Added: 3}, st)
	assert.Equal(t, []string{"a.jsonl", "b.jsonl"}, wrapped)
	id, _ := s.Embedder()
	assert.Equal(t, NewHashEmbedder(DefaultDim).ID(), id)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.jsonl"), []byte("{nope\n"), 0o644))
	_, err = s.ImportFiles(ctx, []string{filepath.Join(dir, "bad.jsonl")}, opt, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad.jsonl")
	assert.False(t, errors.Is(err, ErrNoDatabase))
}

// CheckEntry names the field Add would refuse.
func TestCheckEntry(t *testing.T) {
	require.NoError(t, CheckEntry("boil/3", Entry{Content: "heat the pot", Score: 80}))
	for _, tc := range []struct {
		ns   string
		e    Entry
		want string
	}{
		{"a", Entry{Content: " "}, "content is empty"},
		{" ", Entry{Content: "x"}, "namespace is empty"},
		{"a", Entry{Content: "x", Score: math.NaN()}, "score NaN"},
		{"a", Entry{Content: "x", Score: math.Inf(1)}, "score +Inf"},
		{"a", Entry{Content: "x", Key: "\xff"}, "key is not valid UTF-8"},
		{"a", Entry{Content: "x", Episode: "\xff"}, "episode is not valid UTF-8"},
		{"\xff", Entry{Content: "x"}, "namespace is not valid UTF-8"},
	} {
		err := CheckEntry(tc.ns, tc.e)
		require.Error(t, err, tc.want)
		assert.True(t, strings.HasPrefix(err.Error(), tc.want), err.Error())
	}
}
