package llama

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestExpNegAccuracy(t *testing.T) {
	worst := 0.0
	for x := -708.0; x <= 0; x += 0.000731 {
		want := math.Exp(x)
		if rel := math.Abs(expNeg(x)-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 1e-9 {
		t.Fatalf("expNeg worst relative error %g", worst)
	}
	if expNeg(-800) != 0 || expNeg(0) != 1 || !math.IsNaN(expNeg(math.NaN())) {
		t.Fatal("expNeg edge cases")
	}
}

// TestSamplerTruncation checks top-k/top-p/min-p against a direct
// computation: every drawn token must lie in the kept set, and the kept
// set must be reachable.
func TestSamplerTruncation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 300)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	order := make([]int32, len(logits))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if logits[a] != logits[b] {
			if logits[a] > logits[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	probs := make([]float64, len(logits))
	mx, _, ls := logSoftmaxStats(logits)
	for i, l := range logits {
		probs[i] = math.Exp(float64(l) - float64(mx) - ls)
	}
	for _, p := range []SampleParams{
		{Temperature: 1, TopK: 5},
		{Temperature: 0.7, TopP: 0.5},
		{Temperature: 1.5, MinP: 0.2},
		{Temperature: 1, TopK: 50, TopP: 0.8, MinP: 0.05},
	} {
		// expected kept set
		keep := len(order)
		if p.TopK > 0 {
			keep = p.TopK
		}
		norm := 0.0
		for _, id := range order[:keep] {
			norm += probs[id]
		}
		if p.TopP > 0 {
			cum := 0.0
			for i, id := range order[:keep] {
				cum += probs[id] / norm
				if cum >= float64(p.TopP) {
					keep = i + 1
					break
				}
			}
		}
		if p.MinP > 0 {
			for i, id := range order[:keep] {
				if probs[id] < float64(p.MinP)*probs[order[0]] {
					keep = max(i, 1)
					break
				}
			}
		}
		allowed := map[int32]bool{}
		for _, id := range order[:keep] {
			allowed[id] = true
		}
		s := newSampler(p, 0)
		seen := map[int32]bool{}
		for i := 0; i < 3000; i++ {
			tok, lp, err := s.sample(logits, make([]float64, len(logits)))
			if err != nil {
				t.Fatal(err)
			}
			if !allowed[tok] {
				t.Fatalf("%+v: drew %d outside the kept set of %d", p, tok, keep)
			}
			if d := math.Abs(float64(lp) - math.Log(probs[tok])); d > 1e-5 {
				t.Fatalf("log-prob of %d: %v, want %v", tok, lp, math.Log(probs[tok]))
			}
			seen[tok] = true
		}
		if keep <= 10 && len(seen) != keep {
			t.Fatalf("%+v: saw %d of %d kept tokens", p, len(seen), keep)
		}
	}
	// non-finite logits are an error, not a panic
	bad := slices.Clone(logits)
	bad[7] = float32(math.NaN())
	if _, _, err := newSampler(SampleParams{Temperature: 1}, 0).sample(bad, make([]float64, len(bad))); err == nil {
		t.Fatal("NaN logits accepted")
	}
}

// expNegRef is the Go expNeg the sampler used before sample.c: the C
// version must equal it bit for bit.
func expNegRef(x float64) float64 {
	if x < -708 || x != x {
		if x != x {
			return x
		}
		return 0
	}
	const (
		log2e = 1.4426950408889634
		ln2hi = 6.93147180369123816490e-01
		ln2lo = 1.90821492927058770002e-10
	)
	k := float64(int64(x*log2e - 0.5))
	r := x - k*ln2hi - k*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320))))))))
	return p * math.Float64frombits(uint64(int64(k)+1023)<<52)
}

// sampleRef is the Go sampler before sample.c, for the untruncated draw
// (greedy, or temperature T over the whole vocabulary): a seed must draw
// the same tokens with the same log-probs (bit for bit at T = 1 and
// greedy; at T != 1 the reference used math.Exp, the C code expNeg).
func sampleRef(rng *rand.Rand, logits []float32, temp float64) (int32, float32) {
	mx := float32(math.Inf(-1))
	arg := 0
	for i, l := range logits {
		if l > mx {
			mx, arg = l, i
		}
	}
	m := float64(mx)
	exps := make([]float64, len(logits))
	var sum float64
	for i, l := range logits {
		exps[i] = expNegRef(float64(l) - m)
		sum += exps[i]
	}
	logSum := math.Log(sum)
	lp := func(t int) float32 { return float32(float64(logits[t]) - m - logSum) }
	if temp <= 0 {
		return int32(arg), lp(arg)
	}
	if temp == 1 {
		u := rng.Float64() * math.Exp(logSum)
		var c float64
		for i, e := range exps {
			c += e
			if u < c {
				return int32(i), lp(i)
			}
		}
		return int32(arg), lp(arg)
	}
	inv := 1 / temp
	var sumT float64
	for _, l := range logits {
		sumT += math.Exp((float64(l) - m) * inv)
	}
	u := rng.Float64() * sumT
	var cum float64
	for i, l := range logits {
		cum += math.Exp((float64(l) - m) * inv)
		if u < cum {
			return int32(i), lp(i)
		}
	}
	return int32(len(logits) - 1), lp(len(logits) - 1)
}

func TestExpNegBitExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	xs := []float64{0, math.Copysign(0, -1), -1e-300, -5e-324, -1, -0.5, -0.34657359027997264, -708, -707.9999999, -708.0000001, -709, -745, -1e308, math.Inf(-1), math.NaN()}
	for i := 0; i < 200000; i++ {
		xs = append(xs, -r.ExpFloat64()*float64(1+i%5)*40, -r.Float64()*1e-6, -float64(r.IntN(800))-r.Float64()) // the domain: x <= 0
	}
	many := expNegMany(xs)
	for i, x := range xs {
		got, want := expNeg(x), expNegRef(x)
		if math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("expNeg(%v) = %v (%x), Go reference %v (%x)", x, got, math.Float64bits(got), want, math.Float64bits(want))
		}
		if math.Float64bits(many[i]) != math.Float64bits(want) && !(math.IsNaN(want) && many[i] == 0) {
			t.Fatalf("vector expNeg(%v) = %v (%x), Go reference %v (%x)", x, many[i], math.Float64bits(many[i]), want, math.Float64bits(want))
		}
	}
}

// TestSampleEqualsReference: for a given seed the C passes draw the tokens
// the Go sampler drew, with the same log-probs, on logits shaped like a
// model's (one large vocabulary, masked tokens, ties, a peaked row).
func TestSampleEqualsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rows := [][]float32{}
	for _, v := range []int{2, 7, 513, 4096, 152064} {
		l := make([]float32, v)
		for i := range l {
			l[i] = float32(r.NormFloat64() * 3)
		}
		rows = append(rows, l)
	}
	peaked := slices.Clone(rows[3])
	peaked[100] = 60
	peaked[5] = float32(math.Inf(-1))
	ties := make([]float32, 1000)
	for i := range ties {
		ties[i] = float32(i % 3)
	}
	rows = append(rows, peaked, ties)
	tMismatch := 0
	for ri, l := range rows {
		pre := make([]float64, len(l))
		for _, temp := range []float64{0, 1, 0.7, 1.3} {
			draws := 200
			if len(l) > 10000 {
				draws = 20
			}
			s := newSampler(SampleParams{Temperature: float32(temp), Seed: uint64(ri), SeqOffset: 0}, 3)
			ref := rand.New(rand.NewPCG(uint64(ri), 3))
			for d := 0; d < draws; d++ {
				tok, lp, err := s.sample(l, pre)
				if err != nil {
					t.Fatal(err)
				}
				wt, wlp := sampleRef(ref, l, temp)
				if temp == 1 || temp == 0 {
					if tok != wt || math.Float32bits(lp) != math.Float32bits(wlp) {
						t.Fatalf("row %d (V %d) T %v draw %d: (%d, %v), reference (%d, %v)", ri, len(l), temp, d, tok, lp, wt, wlp)
					}
				} else if tok != wt {
					tMismatch++
				}
			}
		}
	}
	if tMismatch > 0 {
		t.Errorf("%d draws at T != 1 differ from math.Exp's (expected none at this count: the exps differ by < 1e-9)", tMismatch)
	}
}

// TestSampleRowsWorkers: one seed, the same samples on any number of
// workers.
func TestSampleRowsWorkers(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const n, V = 13, 3000
	rows := make([]float32, n*V)
	for i := range rows {
		rows[i] = float32(r.NormFloat64() * 2)
	}
	var want []int32
	for _, workers := range []int{1, 2, 3, 8, 32} {
		ss := make([]*sampler, n)
		for k := range ss {
			ss[k] = newSampler(SampleParams{Temperature: 1, Seed: 9}, k)
		}
		var scratch [][]float64
		var got []int32
		for step := 0; step < 5; step++ {
			toks, lps := make([]int32, n), make([]float32, n)
			if err := sampleRows(ss, func(k int) []float32 { return rows[k*V : (k+1)*V] }, workers, &scratch, toks, lps); err != nil {
				t.Fatal(err)
			}
			got = append(got, toks...)
		}
		if want == nil {
			want = got
		} else if !slices.Equal(got, want) {
			t.Fatalf("%d workers: %v, 1 worker: %v", workers, got, want)
		}
	}
	// an error is the first one in row order, whatever the workers
	ss := []*sampler{newSampler(SampleParams{Temperature: 1}, 0), newSampler(SampleParams{Temperature: 1}, 1)}
	bad := slices.Clone(rows[:2*V])
	bad[V+3] = float32(math.NaN())
	err := sampleRows(ss, func(k int) []float32 { return bad[k*V : (k+1)*V] }, 2, new([][]float64), make([]int32, 2), make([]float32, 2))
	if err == nil {
		t.Fatal("NaN row accepted")
	}
}

// TestGenerateSameOnAnyThreads: a seed gives the same samples (tokens and
// log-probs) whether the context samples its sequences on one thread or
// several (sampleRows spreads them over the context's threads).
func TestGenerateSameOnAnyThreads(t *testing.T) {
	m, err := LoadModel(tinyPath, ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompts := [][]int32{{1, 2, 3, 4}, {5, 6, 7}}
	var want [][]Sequence
	for _, threads := range []int{1, 2, 3} {
		c, err := NewContext(m, ContextParams{NCtx: 64, NSeqMax: 8, Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.GenerateMany(context.Background(), prompts, SampleParams{N: 3, MaxTokens: 20, Temperature: 1, Seed: 11, IgnoreEOG: true})
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
			continue
		}
		for i := range got {
			for j := range got[i] {
				if !slices.Equal(got[i][j].Tokens, want[i][j].Tokens) || !slices.Equal(got[i][j].LogProbs, want[i][j].LogProbs) {
					t.Fatalf("%d threads, prompt %d seq %d: %v, 1 thread: %v", threads, i, j, got[i][j].Tokens, want[i][j].Tokens)
				}
			}
		}
	}
}
