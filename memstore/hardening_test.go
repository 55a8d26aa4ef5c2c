package memstore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const firstAddEnv = "EMPO2_MEMSTORE_FIRST_ADD_CHILD"

// TestConcurrentFirstAddsProcesses: 8 processes make, in 25 rounds, a
// first add each to the round's new file at the same moment, the way
// `empo2 memory add` does (open without an embedder, attach the default
// hash embedder, add, close). All 200 calls must succeed:
// the store's metadata is created insert-if-absent and the embedder and the
// index are read from one snapshot (before that, 6 of 80 calls failed with
// a false "database is corrupt: entry 1 was embedded by … the store by """).
func TestConcurrentFirstAddsProcesses(t *testing.T) {
	const procs, adds = 8, 25
	const round = 60 * time.Millisecond
	if dir := os.Getenv(firstAddEnv); dir != "" {
		id, _ := strconv.Atoi(os.Getenv(firstAddEnv + "_ID"))
		start, _ := strconv.ParseInt(os.Getenv(firstAddEnv+"_START"), 10, 64)
		for i := 0; i < adds; i++ {
			time.Sleep(time.Until(time.Unix(0, start).Add(time.Duration(i) * round)))
			path := filepath.Join(dir, fmt.Sprintf("round%02d.db", i))
			if err := firstAdd(path, fmt.Sprintf("process %d tip %d", id, i)); err != nil {
				fmt.Printf("fail %d: %v\n", i, err)
				continue
			}
			fmt.Println("ok")
		}
		return
	}
	dir := t.TempDir()
	start := time.Now().Add(time.Second).UnixNano() // all children started by then
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	var fails []string
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrentFirstAddsProcesses$", "-test.count=1")
			cmd.Env = append(os.Environ(), firstAddEnv+"="+dir, fmt.Sprintf("%s_ID=%d", firstAddEnv, p), fmt.Sprintf("%s_START=%d", firstAddEnv, start))
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fails = append(fails, err.Error())
			}
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				switch l := sc.Text(); {
				case l == "ok":
					ok++
				case strings.HasPrefix(l, "fail"):
					fails = append(fails, l)
				}
			}
		}()
	}
	wg.Wait()
	assert.Empty(t, fails)
	assert.Equal(t, procs*adds, ok)
	for i := 0; i < adds; i++ {
		s := openT(t, filepath.Join(dir, fmt.Sprintf("round%02d.db", i)), nil)
		st, err := s.Stats(context.Background())
		require.NoError(t, err)
		assert.Equal(t, procs, st.Entries)
	}
}

func firstAdd(path, content string) error {
	s, err := Open(path, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if id, _ := s.Embedder(); id == "" {
		if err := s.SetEmbedder(NewHashEmbedder(DefaultDim)); err != nil {
			return err
		}
	} else if e, ok := BuiltinEmbedder(id); !ok {
		return fmt.Errorf("unknown embedder %q", id)
	} else if err := s.SetEmbedder(e); err != nil {
		return err
	}
	_, err = s.Add(context.Background(), "ns/0", []Entry{{Content: content}})
	return err
}

// TestNegativeCapRefused: a negative cap is an error, not "no cap".
func TestNegativeCapRefused(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "m.db"), nil, WithCap(-1))
	require.ErrorIs(t, err, ErrInvalid)
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), nil, WithCap(0))
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 0, st.Cap)
}

// TestInvalidUTF8Refused: content, episode and namespace that are not
// valid UTF-8 are refused at Add (they could not round-trip through the
// JSONL export byte-exactly).
func TestInvalidUTF8Refused(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), NewHashEmbedder(16))
	ctx := context.Background()
	_, err := s.Add(ctx, "n", []Entry{{Content: "caf\xe9"}})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = s.Add(ctx, "n", []Entry{{Content: "ok", Episode: "\xff"}})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = s.Add(ctx, "n\xfe", []Entry{{Content: "ok"}})
	assert.ErrorIs(t, err, ErrInvalid)
	n, err := s.Add(ctx, "n", []Entry{{Content: "café ☕"}})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// TestReadOnlyOpen: a ReadOnly store reads everything, writes nothing and
// refuses writes with ErrReadOnly; it needs an existing file.
func TestReadOnlyOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "m.db")
	_, err := Open(path, nil, ReadOnly())
	require.ErrorIs(t, err, os.ErrNotExist)
	w, err := Open(path, NewHashEmbedder(16))
	require.NoError(t, err)
	_, err = w.Add(ctx, "n", []Entry{{Content: "open the door"}, {Content: "take the key"}})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	s, err := Open(path, NewHashEmbedder(16), ReadOnly())
	require.NoError(t, err)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Entries)
	r, err := s.RetrieveText(ctx, "n", "open the door", Query{K: DefaultK, Threshold: -1})
	require.NoError(t, err)
	assert.Equal(t, 2, r.Count)
	_, err = s.Add(ctx, "n", []Entry{{Content: "x"}})
	assert.ErrorIs(t, err, ErrReadOnly)
	_, err = s.Prune(ctx, PruneOptions{Keep: 1})
	assert.ErrorIs(t, err, ErrReadOnly)
	_, err = s.Reset(ctx, "")
	assert.ErrorIs(t, err, ErrReadOnly)
	_, err = s.Import(ctx, strings.NewReader(`{"namespace":"n","content":"y"}`))
	assert.ErrorIs(t, err, ErrReadOnly)
	require.NoError(t, s.Close())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a read-only open changed the file")
	_, err = Open(path, nil, ReadOnly(), WithCap(5))
	assert.ErrorIs(t, err, ErrInvalid)
}

// TestStatsListReadNoEmbeddings: Stats and List of a store opened
// WithoutIndex allocate (Go heap) a small fraction of the embeddings'
// size, measured; the same open with the index allocates at least the
// embeddings, so the bound can fail. Stats runs on a covering index.
func TestStatsListReadNoEmbeddings(t *testing.T) {
	const n, dim = 20000, 384
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "big.db")
	w, err := Open(path, vecEmb{"v", dim}, WithCap(0))
	require.NoError(t, err)
	for b := 0; b < 4; b++ {
		es := make([]Entry, n/4)
		for i := range es {
			v := make([]float32, dim)
			v[(b*len(es)+i)%dim] = 1
			v[(b+i)%dim] += 0.5
			es[i] = Entry{Content: fmt.Sprintf("tip %d/%d", b, i), Score: float64(i % 100), Embedding: v}
		}
		_, err := w.Add(ctx, fmt.Sprintf("ns/%d", b%2), es)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	embBytes := uint64(n * dim * 4)

	alloc := func(f func()) uint64 {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		f()
		runtime.ReadMemStats(&m1)
		return m1.TotalAlloc - m0.TotalAlloc
	}
	var st Stats
	got := alloc(func() {
		s, err := Open(path, nil, ReadOnly(), WithoutIndex())
		require.NoError(t, err)
		st, err = s.Stats(ctx)
		require.NoError(t, err)
		es, err := s.List(ctx, "", 20)
		require.NoError(t, err)
		require.Len(t, es, 20)
		require.NoError(t, s.Close())
	})
	require.Equal(t, n, st.Entries)
	full := alloc(func() {
		s, err := Open(path, nil, ReadOnly())
		require.NoError(t, err)
		require.NoError(t, s.Close())
	})
	t.Logf("stats+list without index: %d bytes allocated; open with index: %d; embeddings %d", got, full, embBytes)
	assert.Less(t, got, embBytes/20, "stats/list read the embeddings")
	assert.Greater(t, full, embBytes, "the measurement cannot see the embeddings")

	s := openT(t, path, nil, ReadOnly(), WithoutIndex())
	_, err = s.Retrieve(ctx, "ns/0", make([]float32, dim), DefaultQuery())
	assert.ErrorIs(t, err, ErrNoIndex)
	var plan strings.Builder
	rows, err := s.db.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT n.name, count(e.id), min(e.score), max(e.score), avg(e.score), min(e.created_at), max(e.created_at)
		FROM namespaces n LEFT JOIN entries e ON e.namespace_id = n.id GROUP BY n.id ORDER BY n.name`)
	require.NoError(t, err)
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		plan.WriteString(detail + "\n")
	}
	require.NoError(t, rows.Close())
	assert.Contains(t, plan.String(), "COVERING INDEX entries_meta", "stats would read the rows")
}
