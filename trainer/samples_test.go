package trainer

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// synthEpisode builds an episode whose prompts extend like full-history
// chats: P_{i+1} = P_i(without tips) ‖ R_i ‖ obs. Tip blocks use token ids
// ≥ tipBase (nothing else does) and sit at the end of the prompt before a
// 2-token generation prompt.
const tipBase = 200

func synthEpisode(r *rand.Rand, group int, score float64, steps int, tips bool, vocab int32) rollout.Episode {
	ep := rollout.Episode{Job: rollout.Job{Task: "t", Group: group}, Score: score}
	base := []int32{1, 2, 3}
	for i := 0; i < 3+r.IntN(3); i++ {
		base = append(base, 4+r.Int32N(vocab-10))
	}
	for s := 0; s < steps; s++ {
		obs := []int32{}
		for i := 0; i < 2+r.IntN(4); i++ {
			obs = append(obs, 4+r.Int32N(vocab-10))
		}
		noTips := append(append([]int32(nil), base...), obs...)
		gen := []int32{5, 6}
		rec := rollout.StepRecord{}
		if tips {
			tip := []int32{tipBase, tipBase + 1 + int32(s%3), tipBase + 4}
			rec.Prompt = append(append(append([]int32(nil), noTips...), tip...), gen...)
			rec.TipSpans = [][2]int{{len(noTips), len(noTips) + len(tip)}}
			rec.NoTips = append(append([]int32(nil), noTips...), gen...)
		} else {
			rec.Prompt = append(append([]int32(nil), noTips...), gen...)
		}
		n := 1 + r.IntN(4)
		for i := 0; i < n; i++ {
			rec.Response = append(rec.Response, 4+r.Int32N(vocab-10))
			rec.OldLogp = append(rec.OldLogp, -0.1-3*r.Float32())
		}
		ep.Steps = append(ep.Steps, rec)
		base = append(append(append([]int32(nil), noTips...), gen...), rec.Response...)
	}
	return ep
}

// inMode puts every episode in mode m (rollout.Job.Mode, which BuildSamples
// trains it in) and returns eps.
func inMode(eps []rollout.Episode, m Mode) []rollout.Episode {
	for i := range eps {
		eps[i].Mode = m
	}
	return eps
}

// scored builds episodes of one step each with the given scores, groups,
// memory use and per-step bonuses (score points).
func scored(scores []float64, groups []int, mem []bool, bonus []float64) []rollout.Episode {
	eps := make([]rollout.Episode, len(scores))
	for i := range eps {
		eps[i] = rollout.Episode{Job: rollout.Job{Group: groups[i], Mode: algo.RolloutMode(mem[i])}, Score: scores[i],
			Steps: []rollout.StepRecord{{Intrinsic: bonus[i]}}}
		eps[i].Intrinsic = bonus[i]
	}
	return eps
}

func TestGroupAdvantages(t *testing.T) {
	no := make([]bool, 6)
	eps := scored([]float64{100, 0, 50, 30, 30, 90}, []int{0, 0, 0, 1, 1, 2}, no, make([]float64, 6))
	adv, skip, zv := GroupAdvantages(eps, 0.01, true, 0)
	// group 0: rewards 1, 0, 0.5: mean 0.5, unbiased std 0.5 → 1, −1, 0
	for i, w := range []float64{1, -1, 0} {
		if math.Abs(adv[i][0]-w) > 1e-12 || skip[i] {
			t.Fatalf("adv[%d] = %v (skip %v), want %v", i, adv[i], skip[i], w)
		}
	}
	if zv != 2 || !skip[3] || !skip[4] || !skip[5] || adv[3] != nil {
		t.Fatalf("zero-variance groups: zv=%d skip=%v adv=%v", zv, skip, adv)
	}
	adv, _, _ = GroupAdvantages(eps, 0.01, false, 0)
	if adv[0][0] != 0.5 || adv[1][0] != -0.5 {
		t.Fatalf("no std norm: %v", adv)
	}
	// An episode whose environment failed is no member of its group: group
	// 0 without episode 2 is {1, 0}: mean 0.5, std 1/√2.
	eps[2].End = rollout.EndError
	adv, skip, zv = GroupAdvantages(eps, 0.01, true, 0)
	if w := 1 / math.Sqrt2; math.Abs(adv[0][0]-w) > 1e-12 || math.Abs(adv[1][0]+w) > 1e-12 || adv[2] != nil || !skip[2] || skip[0] || zv != 2 {
		t.Fatalf("with a failed episode: adv=%v skip=%v zv=%d", adv, skip, zv)
	}
}

// TestEqualScoresNoIntrinsicAdvantage is the reported bug: four memory
// episodes of score 10 whose novelty bonuses differ slightly. With the bonus
// added to the episode reward (R = 0.01·10 + {.005, .006, .005, .007}) GRPO
// blew the differences up to A ≈ {−0.78, 0.26, −0.78, 1.31} (recomputed
// here from scratch); a group whose extrinsic scores are all equal must
// carry no signal, whatever the bonuses.
func TestEqualScoresNoIntrinsicAdvantage(t *testing.T) {
	intr := []float64{.005, .006, .005, .007}
	var old []float64
	mean := 0.0
	for _, b := range intr {
		mean += (0.1 + b) / 4
	}
	ss := 0.0
	for _, b := range intr {
		ss += (0.1 + b - mean) * (0.1 + b - mean)
	}
	for _, b := range intr {
		old = append(old, (0.1+b-mean)/(math.Sqrt(ss/3)+1e-6))
	}
	for i, w := range []float64{-0.78, 0.26, -0.78, 1.31} {
		if math.Abs(old[i]-w) > 0.01 {
			t.Fatalf("the repro's old advantages %v", old)
		}
	}
	bonus := []float64{0.5, 0.6, 0.5, 0.7} // score points: 0.01 × these = intr
	eps := scored([]float64{10, 10, 10, 10}, []int{0, 0, 0, 0}, []bool{true, true, true, true}, bonus)
	adv, skip, zv := GroupAdvantages(eps, 0.01, true, 1e-6)
	for i := range eps {
		if !skip[i] || adv[i] != nil {
			t.Fatalf("equal scores: episode %d advantages %v, skip %v", i, adv[i], skip[i])
		}
	}
	if zv != 1 {
		t.Fatalf("zero-variance groups %d", zv)
	}
	samples, st, err := BuildSamples(inMode(eps, ModeOnPolicyTips), SampleConfig{RewardScale: 0.01, StdNorm: true, Eps: 1e-6}, nil, 0)
	if err != nil || len(samples) != 0 || st.ZeroVarGroups != 1 {
		t.Fatalf("samples of an all-equal group: %d, %+v, %v", len(samples), st, err)
	}
}

// TestMixedGroupDoesNotFavourMemory: with per-rollout modes a group mixes
// memory and plain episodes; the same scores must give the memory episodes
// (whose bonuses are all positive) no higher advantages on average than the
// plain ones, while the bonus still orders the memory episodes among
// themselves (per step, at the reference's scale: 1 point = 0.01).
func TestMixedGroupDoesNotFavourMemory(t *testing.T) {
	scores := []float64{10, 30, 10, 30}
	mem := []bool{true, true, false, false}
	bonus := []float64{1, 0.2, 0, 0} // memory: 1/(0+1) and 1/(4+1) points
	eps := scored(scores, []int{0, 0, 0, 0}, mem, bonus)
	adv, skip, _ := GroupAdvantages(eps, 0.01, true, 1e-6)
	if skip[0] {
		t.Fatal("a group with different scores was skipped")
	}
	memSum, plainSum := adv[0][0]+adv[1][0], adv[2][0]+adv[3][0]
	if math.Abs(memSum-plainSum) > 1e-9 {
		t.Fatalf("memory episodes %v vs plain %v: favoured by %v", adv[:2], adv[2:], memSum-plainSum)
	}
	// from scratch: E = .1 .3 .1 .3, mean .2, std = sqrt(4·.01/3); B = (1+.2)/2 = .6;
	// c = .01·(1−.6) = .004 and .01·(.2−.6) = −.004
	std := math.Sqrt(4 * 0.01 / 3)
	want := []float64{(-0.1 + 0.004) / (std + 1e-6), (0.1 - 0.004) / (std + 1e-6), -0.1 / (std + 1e-6), 0.1 / (std + 1e-6)}
	for i := range want {
		if math.Abs(adv[i][0]-want[i]) > 1e-12 {
			t.Fatalf("adv %v, want %v", adv, want)
		}
	}
	// before: R = 0.01·score + bonus·0.01 favoured memory by the bonus mean
	var r []float64
	for i := range eps {
		r = append(r, EpisodeReward(&eps[i], 0.01))
	}
	if math.Abs(r[0]-r[2]-0.01) > 1e-12 || math.Abs(r[1]-r[3]-0.002) > 1e-12 {
		t.Fatalf("episode rewards %v (metrics: score and mean bonus on the reward scale)", r)
	}
}

// TestPerStepBonus: the bonus is per step: within a memory episode, a step
// that saw fewer tips earns more, and the episode's steps get different
// advantages around its extrinsic one; coef 0 (no bonus) gives GRPO on the
// score alone.
func TestPerStepBonus(t *testing.T) {
	mk := func(b0, b1 float64) rollout.Episode {
		return rollout.Episode{Job: rollout.Job{Mode: ModeOnPolicyTips}, Steps: []rollout.StepRecord{{Intrinsic: b0}, {Intrinsic: b1}}}
	}
	eps := []rollout.Episode{mk(1, 1.0/11), mk(0.5, 0.5), mk(0, 0)}
	eps[0].Score, eps[1].Score, eps[2].Score = 50, 40, 45
	eps[2].Mode = ModeOnPolicy
	adv, _, _ := GroupAdvantages(eps, 0.01, false, 0)
	// E − mean(E) = .05, −.05, 0; B = mean(mean(1, 1/11), .5) = (6/11 + .5)/2
	B := (6.0/11 + 0.5) / 2
	want := [][]float64{{0.05 + 0.01*(1-B), 0.05 + 0.01*(1.0/11-B)}, {-0.05 + 0.01*(0.5-B), -0.05 + 0.01*(0.5-B)}, {0, 0}}
	for i := range want {
		for k := range want[i] {
			if math.Abs(adv[i][k]-want[i][k]) > 1e-12 {
				t.Fatalf("adv %v, want %v", adv, want)
			}
		}
	}
	for i := range eps {
		for k := range eps[i].Steps {
			eps[i].Steps[k].Intrinsic = 0
		}
	}
	adv, _, _ = GroupAdvantages(eps, 0.01, false, 0)
	if math.Abs(adv[0][0]-0.05) > 1e-15 || adv[0][0] != adv[0][1] || math.Abs(adv[1][1]+0.05) > 1e-15 {
		t.Fatalf("no bonus: %v", adv)
	}
}

// TestOffPolicyNoTipTokens: no tip token reaches an off-policy training
// input, while on-policy-tips samples keep them; the behaviour (π_old)
// sequences of off-policy samples are the prompts WITH tips; masking drops
// exactly the responses whose min old log-prob < δ where the rule applies.
func TestOffPolicyNoTipTokens(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var eps []rollout.Episode
	for g := 0; g < 2; g++ {
		for k := 0; k < 3; k++ {
			eps = append(eps, synthEpisode(r, g, float64(10*k+g), 4, true, 100))
		}
	}
	// one response very unlikely under π_old
	eps[1].Steps[2].OldLogp[0] = -7
	dc := DefaultConfig()
	cfg := dc.SampleConfig()
	cfg.RecomputeOldLogp = false
	for _, pack := range []bool{false, true} {
		cfg.Pack = pack
		ss, st, err := BuildSamples(inMode(eps, ModeOffPolicy), cfg, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			for _, tok := range s.Seq.Tokens {
				if tok >= tipBase {
					t.Fatalf("pack=%v: tip token %d in an off-policy training input", pack, tok)
				}
			}
			if s.Mode != ModeOffPolicy || !cfg.LowProbMask.Applies(s.Mode) {
				t.Fatalf("sample in mode %s, masking %s", s.Mode, cfg.LowProbMask)
			}
			// old log-probs are the rollout's (with tips)
			for j, sp := range s.Spans {
				rec := eps[s.Episode].Steps[s.Steps[j]]
				if !slices.Equal(s.Seq.OldLogp[sp[0]:sp[1]], rec.OldLogp) || !slices.Equal(s.Seq.Tokens[sp[0]:sp[1]], rec.Response) {
					t.Fatal("span does not hold the step's response and old log-probs")
				}
				if !slices.Equal(s.Seq.Tokens[:sp[0]], rec.PromptWithoutTips()) {
					t.Fatal("off-policy prompt is not exactly PromptWithoutTips")
				}
			}
		}
		if st.MaskedSteps != 1 {
			t.Fatalf("pack=%v: masked %d responses, want 1", pack, st.MaskedSteps)
		}
		if pack && st.PackedEpisodes == 0 {
			t.Fatal("off-policy tip-free prompts extend each other but nothing was packed")
		}
		if !pack && st.Sequences != st.Steps-st.MaskedSteps {
			t.Fatalf("unpacked: %d sequences for %d steps", st.Sequences, st.Steps)
		}
		ss, st, err = BuildSamples(inMode(eps, ModeOnPolicyTips), cfg, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		tipsSeen := false
		for _, s := range ss {
			tipsSeen = tipsSeen || slices.ContainsFunc(s.Seq.Tokens, func(x int32) bool { return x >= tipBase })
		}
		if !tipsSeen || st.MaskedSteps != 0 || st.PackedEpisodes != 0 {
			t.Fatalf("on-policy-tips: tips kept %v, masked %d (rule off-policy), packed %d (tip prompts do not extend)", tipsSeen, st.MaskedSteps, st.PackedEpisodes)
		}
	}
	// recompute: off-policy π_old is computed on the prompts with tips
	cfg.Pack, cfg.RecomputeOldLogp = true, true
	rec := &recordProber{}
	if _, _, err := BuildSamples(inMode(eps, ModeOffPolicy), cfg, rec, 3); err != nil {
		t.Fatal(err)
	}
	if len(rec.seen) == 0 {
		t.Fatal("no recompute")
	}
	for _, s := range rec.seen {
		if !slices.ContainsFunc(s, func(x int32) bool { return x >= tipBase }) {
			t.Fatal("off-policy π_old recomputed without the tips")
		}
	}
}

type recordProber struct{ seen [][]int32 }

func (p *recordProber) LogProbsBatch(seqs [][]int32) ([][]float32, error) {
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		p.seen = append(p.seen, s)
		out[i] = make([]float32, len(s))
		for j := range out[i] {
			out[i][j] = -1
		}
	}
	return out, nil
}

func gradsOf(t *testing.T, pol *cgo.Model, batch []cgo.Sequence) ([][]float32, cgo.Stats) {
	t.Helper()
	pol.ZeroGrads()
	st, err := pol.ForwardBackward(batch, cgo.DefaultObjective(), 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := pol.Grads()
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

func seqs(ss []Sample) []cgo.Sequence {
	out := make([]cgo.Sequence, len(ss))
	for i := range ss {
		out[i] = ss[i].Seq
	}
	return out
}

// buildPackedAndFlat builds the samples of eps with cfg twice: packed
// (cfg.Pack: one sequence per episode where prompts extend) and flat (one
// sequence per step).
func buildPackedAndFlat(t *testing.T, eps []rollout.Episode, cfg SampleConfig, lp LogProber) (packed, flat []Sample, sp, sf SampleStats) {
	t.Helper()
	var err error
	cfg.Pack = true
	if packed, sp, err = BuildSamples(eps, cfg, lp, 0); err != nil {
		t.Fatal(err)
	}
	cfg.Pack = false
	if flat, sf, err = BuildSamples(eps, cfg, lp, 0); err != nil {
		t.Fatal(err)
	}
	return packed, flat, sp, sf
}

// TestPackingSameGradients: training an episode as one packed sequence
// gives the same loss and gradients as one sequence per step (token-mean),
// reading far fewer tokens; recomputed π_old equals the policy's own
// log-probs, so the first update's ratios are exactly 1 (no clipping, KL 0).
func TestPackingSameGradients(t *testing.T) {
	pol, err := cgo.Load(testutil.TinyModelFile(t), cgo.LoRAConfig{Rank: 2, Alpha: 4, Seed: 3, RandomB: true}, testutil.CgoOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	r := rand.New(rand.NewPCG(5, 6))
	vocab := int32(min(pol.Info().NVocab, 190))
	var eps []rollout.Episode
	for k := 0; k < 4; k++ {
		eps = append(eps, synthEpisode(r, k/2, float64(k), 4, false, vocab))
	}
	inMode(eps, ModeOnPolicy)
	dc := DefaultConfig()
	cfg := dc.SampleConfig()
	packed, flat, sp, sf := buildPackedAndFlat(t, eps, cfg, pol)
	if sp.Sequences != 4 || sf.Sequences != 16 || sp.TrainedTokens != sf.TrainedTokens || sp.SampleTokens >= sf.SampleTokens || sp.UnpackedTokens != sf.SampleTokens {
		t.Fatalf("packed %+v, per-step %+v", sp, sf)
	}
	// recomputed π_old agree between packing and not (computed by
	// BuildSamples: masking "always" needs them there, with a threshold
	// that masks nothing)
	cfgNow := cfg
	cfgNow.LowProbMask, cfgNow.LowProbThreshold = MaskEveryStep, -1e30
	packedNow, flatNow, _, _ := buildPackedAndFlat(t, eps, cfgNow, pol)
	for _, s := range packedNow {
		for j, span := range s.Spans {
			for _, f := range flatNow {
				if f.Episode == s.Episode && f.Steps[0] == s.Steps[j] {
					a, b := s.Seq.OldLogp[span[0]:span[1]], f.Seq.OldLogp[f.Spans[0][0]:f.Spans[0][1]]
					for k := range a {
						if math.Abs(float64(a[k]-b[k])) > 1e-4 {
							t.Fatalf("π_old packed %v vs per-step %v", a, b)
						}
					}
				}
			}
		}
	}
	gp, stp := gradsOf(t, pol, seqs(packed))
	gf, stf := gradsOf(t, pol, seqs(flat))
	if stp.Tokens != stf.Tokens || math.Abs(stp.Loss-stf.Loss) > 1e-5 {
		t.Fatalf("loss packed %v (%d tokens), per-step %v (%d)", stp.Loss, stp.Tokens, stf.Loss, stf.Tokens)
	}
	var num, den float64
	for i := range gp {
		for j := range gp[i] {
			d := float64(gp[i][j] - gf[i][j])
			num += d * d
			den += float64(gf[i][j]) * float64(gf[i][j])
		}
	}
	if den == 0 || math.Sqrt(num/den) > 1e-4 {
		t.Fatalf("packed vs per-step gradients: relative L2 %g (|g| %g)", math.Sqrt(num/den), math.Sqrt(den))
	}
	// first update on-policy: ratios exactly 1
	// (optim's test settings: cosine lr 2e-2 → 2e-3, clip 1, one sequence per micro-batch)
	u, err := optim.NewUpdater(pol, optim.Config{AdamW: optim.DefaultAdamW(), MaxGradNorm: 1, Objective: cgo.DefaultObjective(), MicroBatch: 1,
		Schedule: optim.Schedule{Kind: optim.ScheduleCosine, BaseLR: 2e-2, MinLR: 2e-3, Warmup: 1, Total: 8}})
	if err != nil {
		t.Fatal(err)
	}
	us, err := RunUpdates(u, packed, 2, MiniBatching{Size: 2}, rand.New(rand.NewPCG(1, 1)), Progress{})
	if err != nil {
		t.Fatal(err)
	}
	// Exactly 1: π_old of on-policy samples is recomputed by RunUpdates in
	// the update's own micro-batches, so the first update's forward pass is
	// bit-identical to it and k3 KL = Σ e^d − 1 − d is exactly 0 (any
	// |d| ≥ 1 float32 ulp would give > 1e-16).
	if us.Updates != 4 || us.First.ClipFrac != 0 || us.First.DualClipFrac != 0 || us.First.ApproxKL != 0 {
		t.Fatalf("first update: %+v (want ratio 1: no clip, KL 0)", us.First)
	}
	// the deferred π_old replaced the rollout's: it is the policy's (as
	// BuildSamples computes it, to float rounding), not synthEpisode's
	for i, s := range packed {
		for _, sp := range s.Spans {
			for k := sp[0]; k < sp[1]; k++ {
				if d := math.Abs(float64(s.Seq.OldLogp[k] - packedNow[i].Seq.OldLogp[k])); d > 1e-4 {
					t.Fatalf("sample %d token %d: π_old %v, the policy's %v", i, k, s.Seq.OldLogp[k], packedNow[i].Seq.OldLogp[k])
				}
			}
		}
	}
	// and with stale π_old (rollout log-probs off by 0.3) the ratios are not 1
	for i := range packed {
		for t := range packed[i].Seq.OldLogp {
			packed[i].Seq.OldLogp[t] -= 0.3
		}
	}
	us, err = RunUpdates(u, packed, 1, MiniBatching{}, rand.New(rand.NewPCG(1, 1)), Progress{})
	if err != nil || us.First.ApproxKL < 1e-3 {
		t.Fatalf("shifted π_old: KL %v, %v", us.First.ApproxKL, err)
	}
}

// TestZeroVarTrain: with advantage.zero_var train, a group whose scores
// are all equal is trained with advantage 0 on every response token (verl's
// GRPO: the update runs, its policy gradient is zero), where skip builds
// nothing; a group with variance gets the same samples either way, and a
// failed episode stays out in both.
func TestZeroVarTrain(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	eps := []rollout.Episode{
		synthEpisode(r, 0, 10, 3, false, 100), synthEpisode(r, 0, 10, 2, false, 100), // equal: no signal
		synthEpisode(r, 1, 0, 2, false, 100), synthEpisode(r, 1, 50, 3, false, 100), // variance
		synthEpisode(r, 1, 30, 2, false, 100),
	}
	eps[4].End = rollout.EndError
	inMode(eps, ModeOnPolicy)
	cfg := SampleConfig{RewardScale: 0.01, StdNorm: true, Eps: 1e-6}
	skipS, skipSt, err := BuildSamples(eps, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rc := DefaultConfig()
	if rc.SampleConfig().TrainZeroVar {
		t.Fatal("advantage.zero_var defaults to train")
	}
	rc.Advantage.ZeroVar = ZeroVarTrain
	cfg.TrainZeroVar = rc.SampleConfig().TrainZeroVar // the run configuration's setting reaches the samples
	trainS, trainSt, err := BuildSamples(eps, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if skipSt.ZeroVarGroups != 1 || trainSt.ZeroVarGroups != 1 {
		t.Fatalf("zero-variance groups %d, %d", skipSt.ZeroVarGroups, trainSt.ZeroVarGroups)
	}
	byEp := func(ss []Sample, ep int) (out []Sample) {
		for _, s := range ss {
			if s.Episode == ep {
				out = append(out, s)
			}
		}
		return out
	}
	for ep := range eps {
		sk, tr := byEp(skipS, ep), byEp(trainS, ep)
		switch ep {
		case 0, 1:
			if len(sk) != 0 || len(tr) == 0 {
				t.Fatalf("episode %d of the equal group: %d samples with skip, %d with train", ep, len(sk), len(tr))
			}
			steps := 0
			for _, s := range tr {
				steps += len(s.Spans)
				for k, a := range s.Seq.Advantage {
					if a != 0 {
						t.Fatalf("episode %d: advantage %v at %d, want 0", ep, a, k)
					}
				}
			}
			if steps != len(eps[ep].Steps) {
				t.Fatalf("episode %d: %d trained responses for %d steps", ep, steps, len(eps[ep].Steps))
			}
		case 2, 3:
			if len(sk) == 0 || len(sk) != len(tr) {
				t.Fatalf("episode %d: %d vs %d samples", ep, len(sk), len(tr))
			}
			for i := range sk {
				if !slices.Equal(sk[i].Seq.Advantage, tr[i].Seq.Advantage) || !slices.Equal(sk[i].Seq.Tokens, tr[i].Seq.Tokens) {
					t.Fatalf("episode %d sample %d differs between skip and train", ep, i)
				}
			}
		case 4:
			if len(sk)+len(tr) != 0 {
				t.Fatalf("a failed episode was trained")
			}
		}
	}
}
