package memstore

import (
	"context"
	"database/sql"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestThresholdIsStrict uses vectors whose cosine with the query is exactly
// representable (0.5 and 1), so that ">" and ">=" give different answers.
func TestThresholdIsStrict(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), vecEmb{"t/4", 4})
	_, err := s.Add(ctx, "n", []Entry{
		{Content: "exactly 0.5", Score: 1, Embedding: []float32{1, 1, 1, 1}}, // unit (.5,.5,.5,.5)
		{Content: "exactly 1", Score: 2, Embedding: []float32{7, 0, 0, 0}},
	})
	require.NoError(t, err)
	for _, c := range []struct {
		thr  float32
		want []string
	}{
		{0, []string{"exactly 1", "exactly 0.5"}}, // 0 is a threshold like any other
		{0.5, []string{"exactly 1"}},
		{0.4999, []string{"exactly 1", "exactly 0.5"}},
		{1, nil}, // nothing is > 1
	} {
		r, err := s.Retrieve(ctx, "n", e0, Query{K: DefaultK, Threshold: c.thr})
		require.NoError(t, err)
		assert.Equal(t, len(c.want), r.Count, "threshold %v", c.thr)
		if c.want == nil {
			c.want = []string{}
		}
		assert.Equal(t, c.want, contents(r.Entries), "threshold %v", c.thr)
	}
}

// TestTieBreakIsDeterministic: equal scores fall back to similarity, equal
// scores and similarities to the newer entry; the same holds for the
// similarity order, for the large-K path, and after reopening.
func TestTieBreakIsDeterministic(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openT(t, path, vecEmb{"t/4", 4})
	_, err := s.Add(ctx, "n", []Entry{
		{Content: "A 5/0.9", Score: 5, Embedding: at(0.9)},
		{Content: "B 5/0.9", Score: 5, Embedding: at(0.9)}, // same score and vector as A, newer
		{Content: "C 5/0.95", Score: 5, Embedding: at(0.95)},
		{Content: "D 7/0.6", Score: 7, Embedding: at(0.6)},
		{Content: "E 5/0.9", Score: 5, Embedding: at(0.9)}, // newest of the three ties
	})
	require.NoError(t, err)
	byScore := []string{"D 7/0.6", "C 5/0.95", "E 5/0.9", "B 5/0.9", "A 5/0.9"}
	bySim := []string{"C 5/0.95", "E 5/0.9", "B 5/0.9", "A 5/0.9", "D 7/0.6"}
	check := func(s *Store) {
		t.Helper()
		for i := 0; i < 5; i++ {
			for _, k := range []int{DefaultK, 1000} { // small-K insertion and large-K sort
				r, err := s.Retrieve(ctx, "n", e0, Query{K: k, Threshold: DefaultThreshold})
				require.NoError(t, err)
				assert.Equal(t, byScore, contents(r.Entries), "by score, K %d", k)
				r, err = s.Retrieve(ctx, "n", e0, Query{K: k, Order: OrderBySimilarity, Threshold: DefaultThreshold})
				require.NoError(t, err)
				assert.Equal(t, bySim, contents(r.Entries), "by similarity, K %d", k)
			}
		}
		r, err := s.Retrieve(ctx, "n", e0, Query{K: 3, Threshold: DefaultThreshold})
		require.NoError(t, err)
		assert.Equal(t, byScore[:3], contents(r.Entries), "top K cuts the ranked list")
		assert.Equal(t, 5, r.Count)
	}
	check(s)
	require.NoError(t, s.Close())
	check(openT(t, path, vecEmb{"t/4", 4}))
}

// TestStableScoreOrder: OrderByScoreStable ranks by score and keeps
// insertion order among equal scores (the reference code's stable sort), for
// the small-K and the large-K paths and after reopening; the other orders
// are unchanged by it.
func TestStableScoreOrder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s := openT(t, path, vecEmb{"t/4", 4})
	// two episodes under one key each (every step of an episode shares the
	// key of its final context), the better one written second
	var es []Entry
	for i := 0; i < 4; i++ {
		es = append(es, Entry{Content: "weak step " + strconv.Itoa(i), Score: 20, Embedding: at(0.95)})
	}
	for i := 0; i < 4; i++ {
		es = append(es, Entry{Content: "best step " + strconv.Itoa(i), Score: 80, Embedding: at(0.7)})
	}
	es = append(es, Entry{Content: "other best", Score: 80, Embedding: at(0.99)}) // newer, more similar, same score
	_, err := s.Add(ctx, "n", es)
	require.NoError(t, err)
	want := []string{"best step 0", "best step 1", "best step 2", "best step 3", "other best",
		"weak step 0", "weak step 1", "weak step 2", "weak step 3"}
	check := func(s *Store) {
		t.Helper()
		for _, k := range []int{DefaultK, 1000} {
			r, err := s.Retrieve(ctx, "n", e0, Query{K: k, Threshold: DefaultThreshold, Order: OrderByScoreStable})
			require.NoError(t, err)
			assert.Equal(t, want, contents(r.Entries), "K %d", k)
		}
		r, err := s.Retrieve(ctx, "n", e0, Query{K: 3, Threshold: DefaultThreshold, Order: OrderByScoreStable})
		require.NoError(t, err)
		assert.Equal(t, want[:3], contents(r.Entries))
		assert.Equal(t, 9, r.Count)
		r, err = s.Retrieve(ctx, "n", e0, Query{K: 2, Threshold: DefaultThreshold})
		require.NoError(t, err)
		assert.Equal(t, []string{"other best", "best step 3"}, contents(r.Entries), "OrderByScore: similarity, then newer")
	}
	check(s)
	require.NoError(t, s.Close())
	check(openT(t, path, vecEmb{"t/4", 4}))
}

// TestQueryMeansWhatItSays: K must be ≥ 1 and the order known (ErrInvalid,
// never a silent default); a NaN threshold is refused.
func TestQueryMeansWhatItSays(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), vecEmb{"t/4", 4})
	_, err := s.Add(ctx, "n", []Entry{{Content: "a", Score: 1, Embedding: at(0.9)}})
	require.NoError(t, err)
	for _, q := range []Query{{}, {K: 0, Threshold: 0.5}, {K: -1}, {K: 1, Threshold: float32(math.NaN())}, {K: 1, Order: 7}} {
		_, err := s.Retrieve(ctx, "n", e0, q)
		assert.ErrorIs(t, err, ErrInvalid, "%+v", q)
	}
	_, err = s.RetrieveTexts(ctx, []TextQuery{{"n", "x"}}, Query{})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, Query{K: DefaultK, Threshold: DefaultThreshold}, DefaultQuery())
}

// TestCountCountsAllMatches: Count (the trainer's novelty count, EMPO²'s
// intrinsic reward 1/(Count+1)) is every match above the threshold, not only
// the K returned.
func TestCountCountsAllMatches(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), vecEmb{"t/4", 4})
	var es []Entry
	for i := 0; i < 15; i++ {
		es = append(es, Entry{Content: strings.Repeat("x", i+1), Embedding: at(0.9)})
	}
	_, err := s.Add(ctx, "n", es)
	require.NoError(t, err)
	r, err := s.Retrieve(ctx, "n", e0, DefaultQuery())
	require.NoError(t, err)
	assert.Len(t, r.Entries, DefaultK)
	assert.Equal(t, 15, r.Count)
}

// TestPragmasOnEveryConnection reads the settings back from the write
// connection and from several pooled read connections, and checks that
// foreign keys and the busy timeout actually act.
func TestPragmasOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts []Option
		busy int64
		sync int64
	}{
		{"default", nil, 5000, 1},
		{"custom", []Option{WithBusyTimeout(1234 * time.Millisecond), WithSyncFull()}, 1234, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openT(t, filepath.Join(t.TempDir(), "m.db"), NewHashEmbedder(8), c.opts...)
			conns := []*sql.Conn{s.w}
			for i := 0; i < 3; i++ { // held at once, so they are distinct connections
				cn, err := s.db.Conn(ctx)
				require.NoError(t, err)
				defer cn.Close()
				conns = append(conns, cn)
			}
			for i, cn := range conns {
				var mode string
				var fk, busy, sync int64
				require.NoError(t, cn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode))
				require.NoError(t, cn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk))
				require.NoError(t, cn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy))
				require.NoError(t, cn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync))
				assert.Equal(t, "wal", mode, "conn %d", i)
				assert.Equal(t, int64(1), fk, "conn %d", i)
				assert.Equal(t, c.busy, busy, "conn %d", i)
				assert.Equal(t, c.sync, sync, "conn %d", i)
			}
		})
	}
}

func TestForeignKeysEnforced(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), NewHashEmbedder(8))
	_, err := s.Add(ctx, "n", []Entry{{Content: "a tip"}, {Content: "another tip"}})
	require.NoError(t, err)
	_, err = s.w.ExecContext(ctx, `INSERT INTO entries
		(namespace_id, content, content_hash, score, step, episode, created_at, embedder, dim, embedding)
		VALUES (999, 'orphan', x'00', 0, 0, '', 0, 'hash-ngram-v1/8', 8, x'')`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "FOREIGN KEY")
	// ON DELETE CASCADE removes a namespace's entries with it.
	_, err = s.w.ExecContext(ctx, "DELETE FROM namespaces WHERE name = 'n'")
	require.NoError(t, err)
	var n int
	require.NoError(t, s.w.QueryRowContext(ctx, "SELECT count(*) FROM entries").Scan(&n))
	assert.Zero(t, n)
}

// TestBusyTimeoutWaits: while another connection holds the write lock, Add
// waits up to the busy timeout: it succeeds when the lock is released in
// time and fails (after waiting) when it is not.
func TestBusyTimeoutWaits(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	patient := openT(t, path, NewHashEmbedder(8), WithBusyTimeout(5*time.Second))
	hasty := openT(t, path, NewHashEmbedder(8), WithBusyTimeout(100*time.Millisecond))
	other, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
	require.NoError(t, err)
	defer other.Close()
	lock, err := other.Conn(ctx)
	require.NoError(t, err)
	defer lock.Close()

	_, err = lock.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	t0 := time.Now()
	_, err = hasty.Add(ctx, "n", []Entry{{Content: "hasty"}})
	el := time.Since(t0)
	require.Error(t, err, "the lock is held for longer than the busy timeout")
	assert.Contains(t, err.Error(), "locked")
	assert.GreaterOrEqual(t, el, 80*time.Millisecond, "it gave up without waiting")

	done := make(chan error, 1)
	t0 = time.Now()
	go func() {
		_, err := patient.Add(ctx, "n", []Entry{{Content: "patient"}})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	_, err = lock.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	require.NoError(t, <-done)
	assert.GreaterOrEqual(t, time.Since(t0), 250*time.Millisecond)
	st, err := patient.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Entries)
}
