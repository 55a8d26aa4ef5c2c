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

// BonusBound bounds the novelty bonus's term in a group's advantages to
// this share of the group's smallest gap between two different extrinsic
// rewards (GroupAdvantages): below ½, so that the bonus can never reorder
// episodes whose scores differ; ¼ leaves half of the smallest gap.
const BonusBound = 0.25

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
// c_it = f·scale·(b_it − B), b_it the bonus of step t of a memory episode i
// in score points, B the mean over the group's memory episodes of their
// mean bonus (c = 0 for episodes without memory), and f ≤ 1 the bound:
// f = min(1, BonusBound·Δ / max|scale·(b − B)|), Δ the smallest gap
// between two different extrinsic rewards of the group. So
//   - a group whose extrinsic rewards are all equal (or of one episode)
//     carries no signal, whatever the bonuses: its advantages are 0 and
//     skip[i] is true so that its samples are not built;
//   - the bonus has mean zero over the memory episodes of a group: it moves
//     advantage between memory episodes (and between steps) and never
//     favours memory rollouts over the others of a mixed group (mode.per:
//     rollout); in a group of memory episodes only (mode.per: step) this is
//     GRPO's own mean subtraction applied to the bonus;
//   - the std is that of the extrinsic rewards, so bonus differences count
//     in units of the group's score spread, never of their own;
//   - the bonus never changes the order the scores set: |c| ≤ Δ/4, so an
//     episode that scored more has a higher advantage at every step than
//     one that scored less, whatever their bonuses (without the bound, in
//     a partly tied group — scores {0, 0, 0, 1} points, bonuses from
//     memory.key observation's retrieval counts — the bonus term reached
//     ≈ 1.8 std against the tied episodes' −0.5); the bonus orders episodes
//     of equal score, and steps within an episode, only. Under the
//     defaults (bonus ≤ 1 point, score steps of several points) f = 1.
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
		f := bonusFactor(ms, idx, scale, B)
		for _, i := range idx {
			m := &ms[i]
			if len(m.Bonus) == 0 {
				continue
			}
			adv[i] = make([]float64, len(m.Bonus))
			for t := range m.Bonus {
				a := scale*m.Score - mean
				if m.Memory {
					a += f * scale * (m.Bonus[t] - B)
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

// bonusFactor is the f ≤ 1 of GroupAdvantages for the group idx (memory
// bonuses centred on B): 1 when every |scale·(b − B)| is at most
// BonusBound·Δ, Δ the smallest gap between two different extrinsic rewards
// of the group, else the factor that brings the largest to BonusBound·Δ.
func bonusFactor(ms []Member, idx []int, scale, B float64) float64 {
	var cmax float64
	rs := make([]float64, 0, len(idx))
	for _, i := range idx {
		rs = append(rs, scale*ms[i].Score)
		if ms[i].Memory {
			for _, b := range ms[i].Bonus {
				cmax = max(cmax, math.Abs(scale*(b-B)))
			}
		}
	}
	if cmax == 0 {
		return 1
	}
	sort.Float64s(rs)
	gap := math.Inf(1)
	for k := 1; k < len(rs); k++ {
		if d := rs[k] - rs[k-1]; d > 0 {
			gap = min(gap, d)
		}
	}
	if lim := BonusBound * gap; cmax > lim {
		return lim / cmax
	}
	return 1
}
