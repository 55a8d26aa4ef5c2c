package cgo

import (
	"math"
	"testing"

	"github.com/empo2/empo2/algo"
)

// scaledPolicy is a policy loss of its own (ℓ = k·A·logp): cgo evaluates
// whatever surrogate it is given.
type scaledPolicy struct{ k float64 }

func (p scaledPolicy) Token(logp, old, adv float64) (float64, float64, bool, bool) {
	return p.k * adv * logp, p.k * adv, adv < 0, false
}

// TestTokenObjective: the policy term is Objective.Policy's (algo.PPO by
// default, or any other), NLL replaces it by −logp, and the KL and entropy
// terms' derivatives match a float64 central difference.
func TestTokenObjective(t *testing.T) {
	obj := DefaultObjective()
	for _, c := range []struct{ lr, adv float64 }{{0, 1}, {math.Log(2), 1}, {math.Log(0.5), -1}, {math.Log(20), -1}, {30, 1}, {-30, -2}} {
		old := -2.0
		tt := tokenObjective(obj, old+c.lr, old, c.adv, 0, false, 1)
		loss, d, clipped, dual := algo.DefaultPPO().Token(old+c.lr, old, c.adv)
		if tt.loss != loss || tt.pg != loss || tt.dLogp != d || tt.clipped != clipped || tt.dualClip != dual {
			t.Errorf("lr=%v A=%v: %+v, the policy's %v %v %v %v", c.lr, c.adv, tt, loss, d, clipped, dual)
		}
	}
	own := Objective{Policy: scaledPolicy{3}}
	if tt := tokenObjective(own, -2, -1, -0.5, 0, false, 1); tt.loss != 3 || tt.dLogp != -1.5 || !tt.clipped || tt.k1 != 1 {
		t.Errorf("a policy of its own: %+v", tt)
	}
	if tt := tokenObjective(Objective{NLL: true}, -2, -7, 5, 0, false, 1); tt.loss != 2 || tt.dLogp != -1 || tt.k3 != 0 || tt.clipped {
		t.Errorf("NLL: %+v", tt)
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

// TestEntropyNoMask: the graph's entropy equals −Σ p log p computed from
// the log-probs of every vocabulary token; the objective masks nothing.
func TestEntropyNoMask(t *testing.T) {
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
	// no masking here: an old log-prob below δ = −5 is trained (masking is
	// the caller's, algo.Masked in trainer.BuildSamples)
	seq.OldLogp = append([]float32(nil), lps[7]...)
	seq.OldLogp[len(prefix)] = -6
	if st, _ := m.Evaluate([]Sequence{seq}, DefaultObjective(), 0); st.Tokens != 1 || st.Sequences != 1 {
		t.Fatalf("an old log-prob below −5: %+v", st)
	}
}
