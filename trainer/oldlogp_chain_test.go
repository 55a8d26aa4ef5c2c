package trainer

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/empo2/empo2/trainer/rollout"
)

// chainedEpisode is an off-policy episode whose tips stay in every turn
// (memory.tips_in every-turn): step s+1's prompt with tips is step s's
// prompt with tips, its response, the new tips and observation.
func chainedEpisode(r *rand.Rand, group int, score float64, steps int) rollout.Episode {
	ep := rollout.Episode{Job: rollout.Job{Task: "t", Group: group, Mode: ModeOffPolicy}, Score: score}
	with, without := []int32{1, 2, 3}, []int32{1, 2, 3}
	var spans [][2]int
	for s := 0; s < steps; s++ {
		tip := []int32{tipBase, tipBase + 1 + int32(s%3), tipBase + 4}
		spans = append(spans, [2]int{len(with), len(with) + len(tip)})
		obs := []int32{}
		for i := 0; i < 2+r.IntN(4); i++ {
			obs = append(obs, 4+r.Int32N(90))
		}
		with = append(append(append(with, tip...), obs...), 5, 6)
		without = append(append(without, obs...), 5, 6)
		rec := rollout.StepRecord{Prompt: slices.Clone(with), NoTips: slices.Clone(without), TipSpans: slices.Clone(spans)}
		for i := 0; i < 1+r.IntN(4); i++ {
			rec.Response = append(rec.Response, 4+r.Int32N(90))
			rec.OldLogp = append(rec.OldLogp, -0.1-3*r.Float32())
		}
		with = append(with, rec.Response...)
		without = append(without, rec.Response...)
		ep.Steps = append(ep.Steps, rec)
	}
	return ep
}

// causalProber's log-prob at position t depends on tokens[:t+1] only, as a
// causal model's does; it records the sequences it scores.
type causalProber struct{ seen [][]int32 }

func causalLogp(prefix []int32) float32 {
	h := fnv.New32a()
	for _, x := range prefix {
		h.Write([]byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)})
	}
	return -float32(h.Sum32()%1000) / 100
}

func (p *causalProber) LogProbsBatch(seqs [][]int32) ([][]float32, error) {
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		p.seen = append(p.seen, s)
		out[i] = make([]float32, len(s))
		for t := range s {
			out[i][t] = causalLogp(s[:t+1])
		}
	}
	return out, nil
}

// TestOldLogpChainedBehaviour: with tips kept in every turn, an off-policy
// episode's behaviour sequences extend one another and π_old is recomputed
// with ONE forward per episode (not one per turn), every span's log-probs
// those of its own behaviour sequence (prompt with tips ‖ response).
func TestOldLogpChainedBehaviour(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var eps []rollout.Episode
	for g := 0; g < 2; g++ {
		for k := 0; k < 3; k++ {
			eps = append(eps, chainedEpisode(r, g, float64(10*k+g), 5))
		}
	}
	dc := DefaultConfig()
	cfg := dc.SampleConfig()
	cfg.RecomputeOldLogp, cfg.LowProbThreshold = true, -100
	for _, pack := range []bool{true, false} {
		cfg.Pack = pack
		p := &causalProber{}
		ss, _, err := BuildSamples(eps, cfg, p, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.seen) != len(eps) {
			t.Errorf("pack=%v: %d behaviour sequences scored for %d episodes, want one each", pack, len(p.seen), len(eps))
		}
		spans := 0
		for _, s := range ss {
			for j, sp := range s.Spans {
				rec := eps[s.Episode].Steps[s.Steps[j]]
				beh := append(slices.Clone(rec.Prompt), rec.Response...)
				for k := sp[0]; k < sp[1]; k++ {
					pos := len(rec.Prompt) + k - sp[0] // the token's position in its behaviour sequence
					if want := causalLogp(beh[:pos+1]); s.Seq.OldLogp[k] != want {
						t.Fatalf("pack=%v: episode %d step %d token %d: π_old %v, its behaviour sequence's %v", pack, s.Episode, s.Steps[j], k-sp[0], s.Seq.OldLogp[k], want)
					}
				}
				spans++
			}
		}
		if spans != 6*5 {
			t.Fatalf("pack=%v: %d spans, want 30", pack, spans)
		}
	}
	// behaviour sequences that do not extend one another (tips in the last
	// turn only) are scored one by one
	var last []rollout.Episode
	for g := 0; g < 2; g++ {
		last = append(last, synthEpisode(r, g, float64(g), 4, true, 100), synthEpisode(r, g, float64(g+5), 4, true, 100))
	}
	cfg.Pack = true
	p := &causalProber{}
	if _, _, err := BuildSamples(inMode(last, ModeOffPolicy), cfg, p, 0); err != nil {
		t.Fatal(err)
	}
	if len(p.seen) != 4*4 {
		t.Errorf("last-turn tips: %d sequences scored, want 16 (one per step)", len(p.seen))
	}
}
