package memstore

import (
	"sort"
	"sync"
	"time"
)

// entryMeta is the in-memory copy of an entry's columns (all but the vector).
type entryMeta struct {
	content string
	score   float64
	step    int64
	episode string
	created int64 // unix nanoseconds
}

// nsIndex is one namespace's in-memory, normalized matrix, kept in id order
// (oldest first) and in sync with the database after every commit.
type nsIndex struct {
	mu    sync.RWMutex
	id    int64 // namespaces.id
	name  string
	dim   int
	ids   []int64
	vecs  []float32 // len(ids)*dim, row i is entry ids[i]
	metas []entryMeta
}

func (x *nsIndex) len() int { return len(x.ids) }

// appendRows adds rows at the end (caller holds x.mu for writing).
func (x *nsIndex) appendRows(ids []int64, vecs [][]float32, metas []entryMeta) {
	x.ids = append(x.ids, ids...)
	for _, v := range vecs {
		x.vecs = append(x.vecs, v...)
	}
	x.metas = append(x.metas, metas...)
}

// dropOldest removes the n oldest rows (caller holds x.mu for writing).
// Re-slicing from the front is O(1); the next growing append copies only the
// live rows, so the memory is given back then.
func (x *nsIndex) dropOldest(n int) {
	if n <= 0 {
		return
	}
	if n >= len(x.ids) {
		x.ids, x.vecs, x.metas = nil, nil, nil
		return
	}
	for i := 0; i < n; i++ {
		x.metas[i] = entryMeta{} // let the strings go
	}
	x.ids = x.ids[n:]
	x.vecs = x.vecs[n*x.dim:]
	x.metas = x.metas[n:]
}

func (x *nsIndex) entry(i int) Entry {
	m := x.metas[i]
	return Entry{
		ID:        x.ids[i],
		Namespace: x.name,
		Content:   m.content,
		Score:     m.score,
		Step:      m.step,
		Episode:   m.episode,
		Created:   time.Unix(0, m.created).UTC(),
	}
}

// dotGo is the inner product of a and b (len(b) >= len(a)), with 8
// independent accumulators so that the loop is bound by loads, not by the
// latency of one dependency chain.
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		aa := a[i : i+8 : i+8]
		bb := b[i : i+8 : i+8]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
		s4 += aa[4] * bb[4]
		s5 += aa[5] * bb[5]
		s6 += aa[6] * bb[6]
		s7 += aa[7] * bb[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

type hit struct {
	row int32
	sim float32
}

// better reports whether hit a ranks before hit b under order o.
func (x *nsIndex) better(o Order, a, b hit) bool {
	if o == OrderByScore || o == OrderByScoreStable {
		sa, sb := x.metas[a.row].score, x.metas[b.row].score
		if sa != sb {
			return sa > sb
		}
		if o == OrderByScoreStable {
			return a.row < b.row // older first
		}
	}
	if a.sim != b.sim {
		return a.sim > b.sim
	}
	return a.row > b.row // newer first
}

// search scans every row (caller holds x.mu for reading): q must be unit
// length and of dimension x.dim. It returns the top k hits under order o
// and the number of rows with similarity > thr.
func (x *nsIndex) search(q []float32, thr float32, k int, o Order) ([]hit, int) {
	d := x.dim
	n := len(x.ids)
	var top []hit // sorted best first, len <= k
	count := 0
	var all []hit // used instead of top when k is large
	large := k > 64
	for i := 0; i < n; i++ {
		s := dot(q, x.vecs[i*d:])
		if !(s > thr) {
			continue
		}
		count++
		h := hit{int32(i), s}
		if large {
			all = append(all, h)
			continue
		}
		if len(top) == k && !x.better(o, h, top[k-1]) {
			continue
		}
		j := sort.Search(len(top), func(j int) bool { return x.better(o, h, top[j]) })
		if len(top) < k {
			top = append(top, hit{})
		}
		copy(top[j+1:], top[j:len(top)-1])
		top[j] = h
	}
	if large {
		sort.Slice(all, func(i, j int) bool { return x.better(o, all[i], all[j]) })
		if len(all) > k {
			all = all[:k]
		}
		return all, count
	}
	return top, count
}
