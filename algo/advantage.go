package algo

import (
	"math"
	"sort"
)

// IntrinsicReward is the EMPO² novelty bonus coef/(count+1) of a step
// whose retrieval put count tips in the prompt (count ≤ memory.top_k, as
// the reference code counts them; coef when none), in score points (coef
// 1: at most 1 point of the 0–100 range per step). Only memory rollouts
// earn it.
func IntrinsicReward(count int, coef float64) float64 {
	return coef / float64(count+1)
}

// Member is one episode of a GRPO group, as GroupAdvantages sees it.
type Member struct {
	Group  int       // the group: episodes of one task variation in one step
	Score  float64   // final environment score (the extrinsic reward, 0–100)
	Memory bool      // a memory rollout (Mode.Memory): its steps carry Bonus
	Bonus  []float64 // per-step novelty bonus in score points; len = the episode's steps
	Failed bool      // its environment failed: no member of its group
}

// GroupAdvantages returns the GRPO advantage of every step of every episode
// (Shao et al. 2024, "DeepSeekMath", §4.1.2, outcome supervision, with the
// final reward as every step's reward) and EMPO²'s per-step novelty bonus.
// Within the group of members sharing Group, with E_i = scale·score_i the
// extrinsic reward of episode i:
//
//	A_it = (E_i − mean(E) + c_it) / (std(E) + eps)   (stdNorm)
//	A_it =  E_i − mean(E) + c_it                      (otherwise)
//
// with the unbiased std (torch.std, as verl's GRPO estimator) and
// c_it = scale·(b_it − B), b_it the bonus of step t of a memory episode i
// in score points and B the mean over the group's memory episodes of their
// mean bonus (c = 0 for episodes without memory). So
//   - a group whose extrinsic rewards are all equal (or of one episode)
//     carries no signal, whatever the bonuses: its advantages are 0 and
//     skip[i] is true so that its samples are not built;
//   - the bonus has mean zero over the memory episodes of a group: it moves
//     advantage between memory episodes (and between steps) and never
//     favours memory rollouts over the others of a mixed group (mode.per:
//     rollout); in a group of memory episodes only (mode.per: step) this is
//     GRPO's own mean subtraction applied to the bonus;
//   - the std is that of the extrinsic rewards, so bonus differences count
//     in units of the group's score spread, never of their own.
//
// A failed member (Failed) is skipped, and the others are compared among
// themselves.
//
// adv[i][t] is the advantage of step t of member i (nil for a member
// without steps or a skipped group).
func GroupAdvantages(ms []Member, scale float64, stdNorm bool, eps0 float64) (adv [][]float64, skip []bool, zeroVarGroups int) {
	adv = make([][]float64, len(ms))
	skip = make([]bool, len(ms))
	groups := map[int][]int{}
	var keys []int
	for i := range ms {
		if ms[i].Failed {
			skip[i] = true
			continue
		}
		g := ms[i].Group
		if _, ok := groups[g]; !ok {
			keys = append(keys, g)
		}
		groups[g] = append(groups[g], i)
	}
	sort.Ints(keys)
	for _, g := range keys {
		idx := groups[g]
		var mean float64
		for _, i := range idx {
			mean += scale * ms[i].Score
		}
		mean /= float64(len(idx))
		var ss float64
		equal := true
		for _, i := range idx {
			d := scale*ms[i].Score - mean
			ss += d * d
			if ms[i].Score != ms[idx[0]].Score {
				equal = false
			}
		}
		if len(idx) < 2 || equal {
			zeroVarGroups++
			for _, i := range idx {
				skip[i] = true
			}
			continue
		}
		std := math.Sqrt(ss / float64(len(idx)-1))
		// B: mean over the memory episodes of their mean per-step bonus
		var bsum float64
		nmem := 0
		for _, i := range idx {
			if m := &ms[i]; m.Memory && len(m.Bonus) > 0 {
				var b float64
				for _, x := range m.Bonus {
					b += x
				}
				bsum += b / float64(len(m.Bonus))
				nmem++
			}
		}
		B := 0.0
		if nmem > 0 {
			B = bsum / float64(nmem)
		}
		for _, i := range idx {
			m := &ms[i]
			if len(m.Bonus) == 0 {
				continue
			}
			adv[i] = make([]float64, len(m.Bonus))
			for t := range m.Bonus {
				a := scale*m.Score - mean
				if m.Memory {
					a += scale * (m.Bonus[t] - B)
				}
				if stdNorm {
					a /= std + eps0
				}
				adv[i][t] = a
			}
		}
	}
	return adv, skip, zeroVarGroups
}
