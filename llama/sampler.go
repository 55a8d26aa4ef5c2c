package llama

/*
#include "sample.h"
*/
import "C"

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"unsafe"
)

// SampleParams are the sampling settings of Generate. The zero value is
// greedy decoding until EOG or the context is full.
type SampleParams struct {
	// N is the number of sequences sampled from the prompt (default 1);
	// at most the context's NSeqMax.
	N int
	// MaxTokens per sequence; 0 fills the sequence's context.
	MaxTokens int
	// Temperature; <= 0 means greedy (argmax, lowest id on ties).
	Temperature float32
	// TopK keeps the K most likely tokens; 0 disables.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP; 0 or >= 1 disables.
	TopP float32
	// MinP keeps tokens with probability >= MinP times the top one; 0 disables.
	MinP float32
	// Seed of the sampler. Sequence i (0-based, plus SeqOffset) draws from
	// its own generator seeded with (Seed, SeqOffset+i), so a batched
	// generation of N sequences equals N single generations with
	// SeqOffset = 0..N-1.
	Seed uint64
	// SeqOffset shifts the sequence index used to seed each sequence.
	SeqOffset int
	// Stop strings end a sequence when they appear in its text; the text is
	// cut before the stop string (the tokens are kept).
	Stop []string
	// IgnoreEOG keeps sampling after end-of-generation tokens.
	IgnoreEOG bool
}

// Order of the truncation steps, as llama.cpp's default chain: top-k,
// top-p and min-p on the temperature-1 distribution, then temperature, then
// a draw. All of them only decide which token is drawn; the log-prob
// reported for a token is always that of the raw model (temperature 1, no
// truncation).

type cand struct {
	id    int32
	logit float32
}

// better orders candidates by logit, then by lower id.
func better(a, b cand) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

type sampler struct {
	p     SampleParams
	rng   *rand.Rand
	cands []cand
}

func newSampler(p SampleParams, index int) *sampler {
	return &sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, uint64(index)))}
}

// logSoftmaxStats returns the max logit, its (first) index, and
// log(sum(exp(l - max))), the sum in float64 in index order (sample.c).
func logSoftmaxStats(logits []float32) (mx float32, arg int, logSum float64) {
	var cmx C.float
	var carg C.int
	sum := C.empo2_softmax_prefix((*C.float)(unsafe.Pointer(&logits[0])), C.int(len(logits)), 1, nil, &cmx, &carg, nil)
	return float32(cmx), int(carg), math.Log(float64(sum))
}

// expNeg is exp(x) for x <= 0 with relative error < 1e-9 (a degree-8
// Taylor polynomial after reduction by ln 2; sample.c), about 3x faster
// than math.Exp; it returns 0 below -708 (exp < 1e-307, nothing next to
// the max term's 1 in a softmax sum).
func expNeg(x float64) float64 { return float64(C.empo2_expneg(C.double(x))) }

// expNegMany is expNeg over x through the vector code the sampler uses
// (NaN gives 0 there); for tests.
func expNegMany(x []float64) []float64 {
	e := make([]float64, len(x))
	if len(x) > 0 {
		C.empo2_expneg_many((*C.double)(unsafe.Pointer(&x[0])), (*C.double)(unsafe.Pointer(&e[0])), C.int(len(x)))
	}
	return e
}

// LogSoftmax returns log p(token) under logits (temperature 1, no
// truncation), computed stably in float64.
func LogSoftmax(logits []float32, token int32) float32 {
	mx, _, ls := logSoftmaxStats(logits)
	return float32(float64(logits[token]) - float64(mx) - ls)
}

// sample draws a token from logits and returns it with its raw log-prob.
// pre is scratch of at least len(logits) float64s (one per worker; see
// sampleRows).
//
// Without truncation (the RL setting) the draw is: u = U[0,1) · Σ e_i with
// e_i = exp((l_i − max)/T), the token the first i whose running sum
// e_0 + … + e_i exceeds u. sample.c computes the e_i and the running sums
// in float64, index order, and the search is binary over the stored sums;
// at T = 1, Σ e_i is taken as exp(log Σ e_i) as it always was. At T ≠ 1 the
// e_i were math.Exp before and are expNeg now (relative difference < 1e-9,
// so a seed draws another token only when u falls that close to a
// boundary); at T = 1 and greedy the draw is the one it always was.
func (s *sampler) sample(logits []float32, pre []float64) (int32, float32, error) {
	p := &s.p
	V := len(logits)
	full := p.Temperature > 0 && (p.TopK <= 0 || p.TopK >= V) && (p.TopP <= 0 || p.TopP >= 1) && p.MinP <= 0
	var cmx C.float
	var carg C.int
	var sumT C.double
	var cpre *C.double
	invT := 1.0
	if full {
		invT = 1 / float64(p.Temperature)
		cpre = (*C.double)(unsafe.Pointer(&pre[0]))
	}
	sum1 := C.empo2_softmax_prefix((*C.float)(unsafe.Pointer(&logits[0])), C.int(V), C.double(invT), cpre, &cmx, &carg, &sumT)
	mx, arg, logSum := float32(cmx), int(carg), math.Log(float64(sum1))
	if math.IsNaN(logSum) || math.IsInf(logSum, 0) || math.IsInf(float64(mx), 0) || math.IsNaN(float64(mx)) {
		return 0, 0, fmt.Errorf("%w: non-finite logits", ErrDecode)
	}
	lp := func(t int32) float32 { return float32(float64(logits[t]) - float64(mx) - logSum) }
	if p.Temperature <= 0 {
		return int32(arg), lp(int32(arg)), nil
	}
	if full {
		// the temperature-1 branch must stay exactly as it was: same
		// generator call, same products
		var u float64
		if p.Temperature == 1 {
			u = s.rng.Float64() * math.Exp(logSum)
		} else {
			u = s.rng.Float64() * float64(sumT)
		}
		i := int32(C.empo2_search_prefix(cpre, C.int(V), C.double(u)))
		if int(i) == V {
			if p.Temperature == 1 {
				i = int32(arg)
			} else {
				i = int32(V - 1)
			}
		}
		return i, lp(i), nil
	}
	// Candidate set, in descending order where truncation needs it.
	cands := s.cands[:0]
	truncP := p.TopP > 0 && p.TopP < 1
	if p.TopK > 0 && p.TopK < V {
		cands = topK(cands, logits, p.TopK)
	} else {
		for i, l := range logits {
			cands = append(cands, cand{int32(i), l})
		}
		if truncP || p.MinP > 0 {
			if p.MinP > 0 {
				// min-p and top-p both keep a prefix of the sorted
				// candidates, so filtering by min-p first is exact; top-p's
				// normalizer is the full sum, computed before filtering.
				thr := float64(mx) + math.Log(float64(p.MinP))
				k := 0
				for _, c := range cands {
					if float64(c.logit) >= thr {
						cands[k] = c
						k++
					}
				}
				cands = cands[:k]
			}
			sort.Slice(cands, func(i, j int) bool { return better(cands[i], cands[j]) })
		}
	}
	s.cands = cands
	if truncP || p.MinP > 0 {
		top := float64(cands[0].logit)
		// normalizer of the candidate set before truncation
		var norm float64
		if p.TopK > 0 && p.TopK < V {
			for _, c := range cands {
				norm += math.Exp(float64(c.logit) - top)
			}
		} else {
			norm = math.Exp(logSum + float64(mx) - top)
		}
		keep := len(cands)
		if truncP {
			var cum float64
			for i, c := range cands {
				cum += math.Exp(float64(c.logit)-top) / norm
				if cum >= float64(p.TopP) {
					keep = i + 1
					break
				}
			}
		}
		if p.MinP > 0 {
			thr := top + math.Log(float64(p.MinP))
			for i, c := range cands[:keep] {
				if float64(c.logit) < thr {
					keep = max(i, 1)
					break
				}
			}
		}
		cands = cands[:keep]
	}
	// temperature and draw
	top := float64(cands[0].logit)
	for _, c := range cands {
		top = math.Max(top, float64(c.logit))
	}
	inv := 1 / float64(p.Temperature)
	var sum float64
	for _, c := range cands {
		sum += math.Exp((float64(c.logit) - top) * inv)
	}
	u := s.rng.Float64() * sum
	var cum float64
	for _, c := range cands {
		cum += math.Exp((float64(c.logit) - top) * inv)
		if u < cum {
			return c.id, lp(c.id), nil
		}
	}
	last := cands[len(cands)-1].id
	return last, lp(last), nil
}

// topK returns the k best candidates in descending order, using a size-k
// min-heap (O(V log k)).
func topK(dst []cand, logits []float32, k int) []cand {
	h := dst[:0]
	// heap property: h[0] is the worst kept candidate
	worse := func(a, b cand) bool { return better(b, a) }
	down := func(i int) {
		n := len(h)
		for {
			l := 2*i + 1
			if l >= n {
				return
			}
			m := l
			if r := l + 1; r < n && worse(h[r], h[l]) {
				m = r
			}
			if !worse(h[m], h[i]) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i, l := range logits {
		c := cand{int32(i), l}
		if len(h) < k {
			h = append(h, c)
			for j := len(h) - 1; j > 0; {
				parent := (j - 1) / 2
				if !worse(h[j], h[parent]) {
					break
				}
				h[j], h[parent] = h[parent], h[j]
				j = parent
			}
			continue
		}
		if better(c, h[0]) {
			h[0] = c
			down(0)
		}
	}
	sort.Slice(h, func(i, j int) bool { return better(h[i], h[j]) })
	return h
}

// sampleRows samples one token per sampler: ss[k] draws from row(k) and
// writes the token and its raw log-prob to toks[k] and lps[k]. Samplers are
// spread over up to workers goroutines, each with its own scratch; every
// sampler owns its generator, so the result does not depend on workers.
// The error is the first one in k order.
func sampleRows(ss []*sampler, row func(k int) []float32, workers int, scratch *[][]float64, toks []int32, lps []float32) error {
	workers = max(1, min(workers, len(ss)))
	for len(*scratch) < workers {
		*scratch = append(*scratch, nil)
	}
	errs := make([]error, len(ss))
	run := func(w int) {
		for k := w; k < len(ss); k += workers {
			l := row(k)
			pre := (*scratch)[w]
			if len(pre) < len(l) {
				pre = make([]float64, len(l))
				(*scratch)[w] = pre
			}
			toks[k], lps[k], errs[k] = ss[k].sample(l, pre)
		}
	}
	if workers == 1 {
		run(0)
	} else {
		var wg sync.WaitGroup
		for w := 1; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(w)
			}()
		}
		run(0)
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
