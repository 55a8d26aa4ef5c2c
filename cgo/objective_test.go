package cgo

import (
	"math"
	"testing"
)

// TestTokenObjective checks the per-token loss against the textbook
// formulas and its derivative against a float64 central difference away
// from the kinks.
func TestTokenObjective(t *testing.T) {
	obj := DefaultObjective() // ε 0.2/0.3, dual clip 10
	cases := []struct {
		lr, adv       float64 // log-ratio, advantage
		loss          float64
		clipped, dual bool
	}{
		{0, 1, -1, false, false},                  // r = 1
		{math.Log(2), 1, -1.3, true, false},       // A > 0, r > 1+ε_high: clipped at 1.3
		{math.Log(0.5), 1, -0.5, false, false},    // A > 0, r < 1−ε_low: unclipped (min picks r·A)
		{math.Log(0.5), -1, 0.8, true, false},     // A < 0, r < 1−ε_low: clipped at 0.8
		{math.Log(2), -1, 2, false, false},        // A < 0, r = 2: unclipped
		{math.Log(20), -1, 10, false, true},       // A < 0, r = 20 > c: dual clip −c·A
		{math.Log(1.1), 0.5, -0.55, false, false}, // inside the trust region
		{30, 1, -1.3, true, false},                // huge ratio, A > 0: clipped, finite
		{-30, -2, 1.6, true, false},               // tiny ratio, A < 0: clipped, finite
		{30, -1, 10, false, true},                 // huge ratio, A < 0: dual clip, finite
	}
	for _, c := range cases {
		old := -2.0
		tt := tokenObjective(obj, old+c.lr, old, c.adv, 0, false, 1)
		if math.Abs(tt.loss-c.loss) > 1e-6 || tt.clipped != c.clipped || tt.dualClip != c.dual {
			t.Errorf("lr=%.3f A=%v: loss %.6f clipped %v dual %v; want %.6f %v %v", c.lr, c.adv, tt.loss, tt.clipped, tt.dualClip, c.loss, c.clipped, c.dual)
		}
		if math.IsNaN(tt.dLogp) || math.IsInf(tt.dLogp, 0) {
			t.Errorf("lr=%v: non-finite derivative", c.lr)
		}
	}
	// derivative vs central difference, with KL and entropy terms on
	obj.KLCoef, obj.EntropyCoef = 0.2, 0.01
	for _, lr := range []float64{-1.5, -0.5, -0.1, 0, 0.1, 0.4, 1.5, 2.5, 3} {
		for _, adv := range []float64{-1.3, -0.4, 0.6, 2} {
			old, ref := -3.0, -2.5
			f := func(lp float64) float64 { return tokenObjective(obj, lp, old, adv, ref, true, 1.7).loss }
			const h = 1e-6
			fd := (f(old+lr+h) - f(old+lr-h)) / (2 * h)
			got := tokenObjective(obj, old+lr, old, adv, ref, true, 1.7)
			if math.Abs(fd-got.dLogp) > 1e-6*math.Max(1, math.Abs(fd)) {
				t.Errorf("lr=%v A=%v: dℓ/dlogp %v, central difference %v", lr, adv, got.dLogp, fd)
			}
			if got.dEnt != -float64(obj.EntropyCoef) {
				t.Errorf("dℓ/dH = %v", got.dEnt)
			}
		}
	}
}

// TestAggregationValue: Stats.Loss equals the aggregated per-token losses
// (token-mean and seq-mean-token-mean) computed here from LogProbs.
func TestAggregationValue(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 2, RandomB: true}, Options{Threads: 1})
	seqs := []Sequence{
		{Tokens: []int32{1, 2, 3, 4, 5, 6}, Trained: []bool{false, false, false, true, true, true}, Advantage: []float32{0, 0, 0, 1, -1, 0.5}},
		{Tokens: []int32{7, 8, 9}, Trained: []bool{false, true, true}, Advantage: []float32{0, -0.5, 2}},
	}
	for i := range seqs {
		lp, err := m.LogProbs(seqs[i].Tokens)
		if err != nil {
			t.Fatal(err)
		}
		seqs[i].OldLogp = make([]float32, len(lp))
		for j := range lp {
			seqs[i].OldLogp[j] = min(0, lp[j]-0.15*float32(j%3))
		}
	}
	for _, agg := range []Aggregation{AggTokenMean, AggSeqMeanTokenMean} {
		obj := DefaultObjective()
		obj.Aggregation = agg
		var sum float64
		var perSeq []float64
		ntok := 0
		for _, s := range seqs {
			lp, _ := m.LogProbs(s.Tokens)
			ss, n := 0.0, 0
			for j := range s.Tokens {
				if s.Trained[j] {
					ss += tokenObjective(obj, float64(lp[j]), float64(s.OldLogp[j]), float64(s.Advantage[j]), 0, false, 0).loss
					n++
				}
			}
			sum += ss
			ntok += n
			perSeq = append(perSeq, ss/float64(n))
		}
		want := sum / float64(ntok)
		if agg == AggSeqMeanTokenMean {
			want = (perSeq[0] + perSeq[1]) / 2
		}
		st, err := m.Evaluate(seqs, obj, 0)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.Loss-want) > 1e-5 {
			t.Errorf("%s: Stats.Loss %v, want %v", agg, st.Loss, want)
		}
		st2, _ := m.Evaluate(seqs, obj, 0.5)
		if math.Abs(st2.Loss-0.5*sum) > 1e-5 && agg == AggTokenMean {
			t.Errorf("token-mean with scale 0.5: %v, want %v", st2.Loss, 0.5*sum)
		}
	}
}

// TestEntropyAndMaskSwitch: the graph's entropy equals −Σ p log p computed
// from the log-probs of every vocabulary token; low-probability masking
// applies only to sequences that enable it.
func TestEntropyAndMaskSwitch(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 4, RandomB: true}, Options{Threads: 1})
	V := m.Info().NVocab
	prefix := []int32{11, 22, 33, 44}
	all := make([][]int32, V)
	for v := range all {
		all[v] = append(append([]int32(nil), prefix...), int32(v))
	}
	lps, err := m.LogProbsBatch(all)
	if err != nil {
		t.Fatal(err)
	}
	var h, psum float64
	for v := range all {
		lp := float64(lps[v][len(prefix)])
		h -= math.Exp(lp) * lp
		psum += math.Exp(lp)
	}
	if math.Abs(psum-1) > 1e-4 {
		t.Fatalf("Σ p = %v", psum)
	}
	seq := Sequence{Tokens: all[7], Trained: make([]bool, len(all[7])), OldLogp: lps[7], Advantage: make([]float32, len(all[7]))}
	seq.Trained[len(prefix)] = true
	seq.Advantage[len(prefix)] = 1
	st, err := m.Evaluate([]Sequence{seq}, DefaultObjective(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(st.Entropy-h) > 1e-4 {
		t.Fatalf("graph entropy %v, from log-probs %v", st.Entropy, h)
	}
	// masking switch: the same sequence with an old log-prob below δ
	seq.OldLogp = append([]float32(nil), lps[7]...)
	seq.OldLogp[len(prefix)] = -6
	seq.LowProbMask = false
	if st, _ := m.Evaluate([]Sequence{seq}, DefaultObjective(), 0); st.Tokens != 1 || st.MaskedSequences != 0 {
		t.Fatalf("masking off: %+v", st)
	}
	seq.LowProbMask = true
	if st, _ := m.Evaluate([]Sequence{seq}, DefaultObjective(), 0); st.Tokens != 0 || st.MaskedSequences != 1 || st.MaskedTokens != 1 {
		t.Fatalf("masking on: %+v", st)
	}
}

// verlPolicyLoss is an independent transcription of verl's
// compute_policy_loss (vanilla PPO with dual clip) for one token:
//
//	l1 = −A·r, l2 = −A·clip(r, 1−ε_low, 1+ε_high), lc = max(l1, l2)
//	l3 = −A·c; loss = A < 0 ? min(lc, l3) : lc
func verlPolicyLoss(logp, old, adv, epsLow, epsHigh, c float64) float64 {
	lr := math.Max(-20, math.Min(20, logp-old))
	r := math.Exp(lr)
	l1 := -adv * r
	l2 := -adv * math.Max(1-epsLow, math.Min(1+epsHigh, r))
	lc := math.Max(l1, l2)
	if adv < 0 {
		return math.Min(lc, -adv*c)
	}
	return lc
}

// TestTokenObjectiveMatchesVerl compares tokenObjective's loss with the verl
// transcription on a grid spanning every region (both signs of A, ratios
// from e^-25 to e^25), and its derivative with a central difference of the
// verl loss wherever the grid point is away from a kink.
func TestTokenObjectiveMatchesVerl(t *testing.T) {
	obj := DefaultObjective()
	el, eh, c := float64(obj.ClipLow), float64(obj.ClipHigh), float64(obj.DualClip)
	kinks := []float64{math.Log(1 - el), math.Log(1 + eh), math.Log(c), 20, -20}
	n := 0
	for lr := -25.0; lr <= 25; lr += 0.037 {
		for _, adv := range []float64{-3, -1, -0.25, 0.25, 1, 3} {
			old := -4.0
			got := tokenObjective(obj, old+lr, old, adv, 0, false, 0)
			want := verlPolicyLoss(old+lr, old, adv, el, eh, c)
			if math.Abs(got.loss-want) > 1e-12*math.Max(1, math.Abs(want)) {
				t.Fatalf("lr=%v A=%v: loss %v, verl %v", lr, adv, got.loss, want)
			}
			near := false
			for _, k := range kinks {
				near = near || math.Abs(lr-k) < 1e-3
			}
			if near {
				continue
			}
			const h = 1e-6
			fd := (verlPolicyLoss(old+lr+h, old, adv, el, eh, c) - verlPolicyLoss(old+lr-h, old, adv, el, eh, c)) / (2 * h)
			if math.Abs(fd-got.dLogp) > 1e-5*math.Max(1, math.Abs(fd)) {
				t.Fatalf("lr=%v A=%v: dℓ/dlogp %v, verl central difference %v", lr, adv, got.dLogp, fd)
			}
			n++
		}
	}
	t.Logf("%d grid points checked", n)
}
