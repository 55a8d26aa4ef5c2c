package algo

import (
	"math"
	"testing"
)

// members builds one-step members with the given scores, groups, memory use
// and per-step bonuses (score points).
func members(scores []float64, groups []int, mem []bool, bonus []float64) []Member {
	ms := make([]Member, len(scores))
	for i := range ms {
		ms[i] = Member{Group: groups[i], Score: scores[i], Memory: mem[i], Bonus: []float64{bonus[i]}}
	}
	return ms
}

func TestIntrinsicReward(t *testing.T) {
	if IntrinsicReward(1, 1) != 0.5 || IntrinsicReward(0, 2) != 2 || IntrinsicReward(10, 1) != 1.0/11 {
		t.Fatal("IntrinsicReward")
	}
}

func TestGroupAdvantages(t *testing.T) {
	ms := members([]float64{100, 0, 50, 30, 30, 90}, []int{0, 0, 0, 1, 1, 2}, make([]bool, 6), make([]float64, 6))
	adv, skip, zv := GroupAdvantages(ms, 0.01, true, 0)
	// group 0: rewards 1, 0, 0.5: mean 0.5, unbiased std 0.5 → 1, −1, 0
	for i, w := range []float64{1, -1, 0} {
		if math.Abs(adv[i][0]-w) > 1e-12 || skip[i] {
			t.Fatalf("adv[%d] = %v (skip %v), want %v", i, adv[i], skip[i], w)
		}
	}
	if zv != 2 || !skip[3] || !skip[4] || !skip[5] || adv[3] != nil {
		t.Fatalf("zero-variance groups: zv=%d skip=%v adv=%v", zv, skip, adv)
	}
	adv, _, _ = GroupAdvantages(ms, 0.01, false, 0)
	if adv[0][0] != 0.5 || adv[1][0] != -0.5 {
		t.Fatalf("no std norm: %v", adv)
	}
	// a failed member leaves its group: group 0 without member 2 is {1, 0}
	ms[2].Failed = true
	adv, skip, zv = GroupAdvantages(ms, 0.01, true, 0)
	if w := 1 / math.Sqrt2; math.Abs(adv[0][0]-w) > 1e-12 || math.Abs(adv[1][0]+w) > 1e-12 || adv[2] != nil || !skip[2] || skip[0] || zv != 2 {
		t.Fatalf("with a failed member: adv=%v skip=%v zv=%d", adv, skip, zv)
	}
	// a member without steps gets no advantages but still counts in its group
	ms = members([]float64{10, 20, 30}, []int{0, 0, 0}, make([]bool, 3), make([]float64, 3))
	ms[2].Bonus = nil
	adv, skip, _ = GroupAdvantages(ms, 0.01, false, 0)
	if adv[2] != nil || skip[2] || math.Abs(adv[0][0]+0.1) > 1e-12 {
		t.Fatalf("member without steps: adv=%v skip=%v", adv, skip)
	}
}

// TestEqualScoresNoBonusSignal: a group whose scores are all equal carries
// no signal, whatever its bonuses.
func TestEqualScoresNoBonusSignal(t *testing.T) {
	ms := members([]float64{10, 10, 10, 10}, []int{0, 0, 0, 0}, []bool{true, true, true, true}, []float64{0.5, 0.6, 0.5, 0.7})
	adv, skip, zv := GroupAdvantages(ms, 0.01, true, 1e-6)
	for i := range ms {
		if !skip[i] || adv[i] != nil {
			t.Fatalf("equal scores: member %d advantages %v, skip %v", i, adv[i], skip[i])
		}
	}
	if zv != 1 {
		t.Fatalf("zero-variance groups %d", zv)
	}
}

// TestMixedGroupDoesNotFavourMemory: the bonus has mean zero over a group's
// memory members.
func TestMixedGroupDoesNotFavourMemory(t *testing.T) {
	ms := members([]float64{10, 30, 10, 30}, []int{0, 0, 0, 0}, []bool{true, true, false, false}, []float64{1, 0.2, 0, 0})
	adv, _, _ := GroupAdvantages(ms, 0.01, true, 1e-6)
	if d := adv[0][0] + adv[1][0] - adv[2][0] - adv[3][0]; math.Abs(d) > 1e-9 {
		t.Fatalf("memory members favoured by %v: %v", d, adv)
	}
}

// TestBonusCannotReorderScores (issue 36 (c)): a partly tied group, scores
// {0, 0, 0, 1} points, all memory rollouts whose bonuses come from
// observation-keyed retrieval counts — steps that found top_k = 10 tips
// (bonus coef/11) and, here and there, a step that found none (coef): one
// tied episode with such a step, one that always found 10, one in between,
// and the scoring episode, which always found 10. With memory.intrinsic_coef
// 2, unbounded, the first tied episode's empty step outranked every step of
// the scoring episode (computed here from scratch); bounded, every step of
// the scoring episode has a higher advantage than every step of the tied
// ones, for coef 1 and 2, while the bonus still orders the tied episodes'
// steps among themselves.
func TestBonusCannotReorderScores(t *testing.T) {
	for _, coef := range []float64{1, 2} {
		b := func(tips ...int) []float64 {
			var out []float64
			for _, n := range tips {
				out = append(out, IntrinsicReward(n, coef))
			}
			return out
		}
		ms := []Member{
			{Score: 0, Memory: true, Bonus: b(10, 10, 0, 10)},
			{Score: 0, Memory: true, Bonus: b(10, 10, 10)},
			{Score: 0, Memory: true, Bonus: b(10, 3, 10)},
			{Score: 1, Memory: true, Bonus: b(10, 10, 10, 10)},
		}
		// unbounded, from scratch: E = .01·score (mean .0025, std .005), B
		// the mean of the members' mean bonuses
		var B float64
		for _, m := range ms {
			var s float64
			for _, x := range m.Bonus {
				s += x
			}
			B += s / float64(len(m.Bonus)) / float64(len(ms))
		}
		unb := func(i, k int) float64 { return (0.01*ms[i].Score - 0.0025 + 0.01*(ms[i].Bonus[k]-B)) / 0.005 }
		if coef == 2 && !(unb(0, 2) > unb(3, 0)) {
			t.Fatalf("the repro no longer reorders without the bound: %v vs %v", unb(0, 2), unb(3, 0))
		}
		for _, stdNorm := range []bool{true, false} {
			adv, skip, _ := GroupAdvantages(ms, 0.01, stdNorm, 1e-6)
			if skip[0] {
				t.Fatal("skipped")
			}
			lo := math.Inf(1)
			for _, a := range adv[3] {
				lo = min(lo, a)
			}
			for i := 0; i < 3; i++ {
				for k, a := range adv[i] {
					if a >= lo {
						t.Errorf("coef %v stdNorm %v: tied episode %d step %d advantage %.4f ≥ the scoring episode's lowest %.4f", coef, stdNorm, i, k, a, lo)
					}
				}
			}
			if !(adv[0][2] > adv[0][0] && adv[0][2] > adv[1][0]) {
				t.Errorf("coef %v stdNorm %v: the bonus no longer orders tied steps: %v", coef, stdNorm, adv)
			}
			// the bound: no bonus term above a quarter of the score step
			std := 1.0
			if stdNorm {
				std = 0.005 + 1e-6
			}
			for i := 0; i < 3; i++ {
				for _, a := range adv[i] {
					if d := math.Abs(a*std + 0.0025); d > BonusBound*0.01+1e-12 {
						t.Errorf("coef %v stdNorm %v: bonus term %.5f above ¼ of the score step", coef, stdNorm, d)
					}
				}
			}
		}
	}
	// defaults-sized bonuses against score steps of 10 points: not scaled
	ms := members([]float64{10, 20, 30, 30}, []int{0, 0, 0, 0}, []bool{true, true, true, true}, []float64{1, 0.5, 1.0 / 11, 0.25})
	adv, _, _ := GroupAdvantages(ms, 0.01, false, 0)
	B := (1 + 0.5 + 1.0/11 + 0.25) / 4
	if math.Abs(adv[0][0]-(-0.125+0.01*(1-B))) > 1e-15 {
		t.Errorf("a bonus well inside the bound was scaled: %v", adv)
	}
}
