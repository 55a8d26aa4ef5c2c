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
