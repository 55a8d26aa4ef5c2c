package llama

import (
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
	mx, _, ls := logSoftmaxStats(logits, nil)
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
			tok, lp, err := s.sample(logits)
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
	if _, _, err := newSampler(SampleParams{Temperature: 1}, 0).sample(bad); err == nil {
		t.Fatal("NaN logits accepted")
	}
}
