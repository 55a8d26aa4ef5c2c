package trainer

import (
	"errors"
	"fmt"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/trainer/rollout"
)

// ErrSamples: episodes cannot be turned into training samples (a step
// record whose slices disagree, a log-prob provider that fails).
var ErrSamples = errors.New("trainer: bad training samples")

// SampleConfig turns episodes into training sequences.
type SampleConfig struct {
	RewardScale      float64     // R = RewardScale·Score + Intrinsic
	StdNorm          bool        // GRPO: divide by the group std
	Eps              float64     // added to the std
	TrainZeroVar     bool        // zero-variance groups are trained with advantage 0 (else not built)
	LowProbMask      LowProbMask // where masking applies, by mode
	LowProbThreshold float32     // δ (−5)
	Pack             bool        // one sequence per episode where prompts extend
	RecomputeOldLogp bool        // π_old from the training graph instead of the rollout
}

// SampleConfig derives the sample settings of a run configuration.
func (c *Config) SampleConfig() SampleConfig {
	return SampleConfig{RewardScale: c.Advantage.RewardScale, StdNorm: c.Advantage.StdNorm, Eps: c.Advantage.Eps, TrainZeroVar: c.Advantage.ZeroVar == ZeroVarTrain,
		LowProbMask: c.Update.LowProbMask, LowProbThreshold: c.Update.LowProbThreshold,
		Pack: c.Update.Pack && c.Update.Aggregation != cgo.AggSeqMeanTokenMean, RecomputeOldLogp: c.Update.OldLogp == OldLogpRecompute}
}

// SampleStats describes the samples of one step.
type SampleStats struct {
	Episodes       int // episodes trained (with a non-zero advantage, unless TrainZeroVar)
	ZeroVarGroups  int // groups whose rewards are all equal (no signal)
	Steps          int // step samples (responses) before masking
	MaskedSteps    int // responses dropped by low-probability masking
	Sequences      int // training sequences (after packing)
	PackedEpisodes int // episodes trained as fewer sequences than steps
	TrainedTokens  int // response tokens in the loss (after masking)
	SampleTokens   int // tokens of the training sequences (one epoch's forward work)
	UnpackedTokens int // tokens the same samples need one sequence per step
}

// Sample is one training sequence and where it came from.
type Sample struct {
	Seq     cgo.Sequence
	Episode int      // index into the episodes
	Steps   []int    // step indices trained in this sequence
	Spans   [][2]int // [start,end) response spans in Seq.Tokens, one per step
	Mode    Mode     // mode of the episode
	// behaviour: the tokens π_old was computed on per step when they differ
	// from the training tokens (off-policy: the prompt with its tips).
	behaviour [][]int32
	// oldDeferred: π_old of the spans without a behaviour sequence (the
	// sample's own tokens) is still the rollout's; RunUpdates recomputes it
	// in the update's own graph layout (exact ratios of 1 at the first update).
	oldDeferred bool
}

// EpisodeReward is an episode's mean step reward on the reward scale:
// scale·(final score + mean novelty bonus), the bonus being in score points
// (rollout.StepRecord.Intrinsic; 0 for episodes without memory). The final
// score is every step's extrinsic reward ("final reward as step reward").
func EpisodeReward(ep *rollout.Episode, scale float64) float64 {
	return scale * (ep.Score + ep.Intrinsic)
}

// GroupAdvantages is algo.GroupAdvantages over a step's episodes: the
// GRPO advantage of every step of every episode with EMPO²'s per-step
// novelty bonus, within the groups of rollout.Job.Group. An episode is a
// memory member when its mode retrieves tips (algo.Mode.Memory), its bonus
// is its steps' StepRecord.Intrinsic, and one whose environment failed
// (rollout.EndError) is no member of its group. adv[i][t] is the advantage
// of step t of episode i (nil for an episode without steps or a skipped
// group); skip[i] says episode i is not trained.
func GroupAdvantages(eps []rollout.Episode, scale float64, stdNorm bool, eps0 float64) (adv [][]float64, skip []bool, zeroVarGroups int) {
	ms := make([]algo.Member, len(eps))
	for i := range eps {
		ep := &eps[i]
		ms[i] = algo.Member{Group: ep.Group, Score: ep.Score, Memory: ep.Mode.Memory(), Failed: ep.End == rollout.EndError}
		if len(ep.Steps) > 0 {
			ms[i].Bonus = make([]float64, len(ep.Steps))
			for t := range ep.Steps {
				ms[i].Bonus[t] = ep.Steps[t].Intrinsic
			}
		}
	}
	return algo.GroupAdvantages(ms, scale, stdNorm, eps0)
}

// trainPrompt is the prompt a step is trained on: on-policy samples keep
// what the policy saw; off-policy samples take the same chat rendered with
// no tips at all (StepRecord.PromptWithoutTips, tokenized on its own).
func trainPrompt(rec *rollout.StepRecord, mode Mode) []int32 {
	if mode == ModeOffPolicy {
		return rec.PromptWithoutTips()
	}
	return rec.Prompt
}

// LogProber computes log π(tokens[t] | tokens[:t]) for t ≥ 1 (element 0 is
// 0); *cgo.Model implements it.
type LogProber interface {
	LogProbsBatch(seqs [][]int32) ([][]float32, error)
}

// RowLogProber computes log-probs only at the positions a mask selects
// (out[i][t] for want[i][t], 0 elsewhere), projecting only those rows to
// the vocabulary; *cgo.Model implements it. recomputeOld uses it to score
// only the response rows of the π_old sequences.
type RowLogProber interface {
	LogProbsAt(seqs [][]int32, want [][]bool) ([][]float32, error)
}

// ExactLogProber also computes the log-probs of the trained tokens of a
// batch exactly as its ForwardBackward does (same graph batch: sequences,
// padding, rows), so that π_old recomputed on a training sequence equals
// π_θ bit for bit before the first update; *cgo.Model implements it.
type ExactLogProber interface {
	LogProber
	TrainedLogProbs(batch []cgo.Sequence, obj cgo.Objective) ([][]float32, error)
}

// BuildSamples turns a step's episodes into training sequences.
//
// Each episode is trained in its own mode (rollout.Job.Mode, drawn by
// PlanStep). Advantages come from GroupAdvantages (the extrinsic score and
// the per-step novelty bonus); every response token of a step gets its
// step's advantage.
// With cfg.Pack, consecutive steps whose training prompt starts with the
// previous step's prompt and response (full history, no per-step tips) are
// one sequence with every response span trained (token-mean loss: the same
// loss and gradient as one sequence per step, far fewer tokens). π_old is
// the rollout's log-probs, or (RecomputeOldLogp) the training graph's on the
// behaviour tokens: the training sequences themselves on-policy, the
// prompt with its tips off-policy (ratio = π_θ(a|s) / π_old(a|s, tips)).
// Low-probability masking (EMPO², algo.Masked where cfg.LowProbMask
// applies to the episode's mode) drops a whole response whose minimum old
// log-prob is < δ; for packed sequences it is applied per response span,
// so packing never changes which responses are trained. It is applied here
// only: the training graph (cgo) trains every token left Trained.
// microBatch bounds the sequences per LogProbsBatch call (0: all at once).
func BuildSamples(eps []rollout.Episode, cfg SampleConfig, lp LogProber, microBatch int) ([]Sample, SampleStats, error) {
	var st SampleStats
	adv, skip, zv := GroupAdvantages(eps, cfg.RewardScale, cfg.StdNorm, cfg.Eps)
	st.ZeroVarGroups = zv
	if cfg.TrainZeroVar {
		// verl's GRPO: a group without signal still goes through the update
		// with A = 0 (no policy gradient); failed episodes stay out
		for i := range eps {
			if skip[i] && eps[i].End != rollout.EndError {
				skip[i], adv[i] = false, make([]float64, len(eps[i].Steps))
			}
		}
	}
	var samples []Sample
	for i := range eps {
		if skip[i] || len(eps[i].Steps) == 0 {
			continue
		}
		st.Episodes++
		ss, err := episodeSamples(i, &eps[i], adv[i], cfg.Pack)
		if err != nil {
			return nil, st, err
		}
		samples = append(samples, ss...)
	}
	if cfg.RecomputeOldLogp {
		// Masking decided from the rollout's own log-probs first: a sample
		// whose every response is below δ by more than the rollout can
		// differ from the training graph is masked whatever the recompute
		// says, so it is not recomputed (a step whose responses all mask,
		// e.g. an untrained 152k-vocabulary model off-policy, skips π_old).
		kept := samples[:0]
		for _, s := range samples {
			if cfg.LowProbMask.Applies(s.Mode) && allMasked(s, cfg.LowProbThreshold-rolloutLogpTolerance) {
				st.Steps += len(s.Spans)
				st.MaskedSteps += len(s.Spans)
				for _, sp := range s.Spans {
					st.UnpackedTokens += sp[1]
				}
				continue
			}
			kept = append(kept, s)
		}
		samples = kept
	}
	if cfg.RecomputeOldLogp && len(samples) > 0 {
		if lp == nil {
			return nil, st, fmt.Errorf("%w: recomputing π_old needs the training model", ErrSamples)
		}
		// π_old on a sample's own tokens is recomputed by RunUpdates in the
		// update's graph layout when the prober can (ExactLogProber) and
		// masking does not need it now; behaviour sequences (off-policy,
		// the prompt with tips) are recomputed here.
		if _, ok := lp.(ExactLogProber); ok {
			for i := range samples {
				samples[i].oldDeferred = !cfg.LowProbMask.Applies(samples[i].Mode)
			}
		}
		if err := recomputeOld(samples, lp, microBatch); err != nil {
			return nil, st, err
		}
	}
	out := samples[:0]
	for _, s := range samples {
		st.Steps += len(s.Spans)
		mask := cfg.LowProbMask.Applies(s.Mode)
		for _, sp := range s.Spans {
			st.UnpackedTokens += sp[1]
			if mask && algo.Masked(s.Seq.OldLogp[sp[0]:sp[1]], cfg.LowProbThreshold) {
				for t := sp[0]; t < sp[1]; t++ {
					s.Seq.Trained[t] = false
				}
				st.MaskedSteps++
				continue
			}
			st.TrainedTokens += sp[1] - sp[0]
		}
		if !anyTrue(s.Seq.Trained) {
			continue
		}
		if len(s.Spans) > 1 {
			st.PackedEpisodes++
		}
		st.SampleTokens += len(s.Seq.Tokens)
		out = append(out, s)
	}
	st.Sequences = len(out)
	return out, st, nil
}

// rolloutLogpTolerance bounds how far a rollout's log-prob may lie from the
// training graph's recompute of it: ≈1e-5 on the CPU, up to 1e-2 with
// CUDA rollouts (docs/gpu.md); five times the larger.
const rolloutLogpTolerance = 0.05

// allMasked reports whether every response span of s has a rollout
// log-prob below threshold (the sample's OldLogp before any recompute).
func allMasked(s Sample, threshold float32) bool {
	for _, sp := range s.Spans {
		if !algo.Masked(s.Seq.OldLogp[sp[0]:sp[1]], threshold) {
			return false
		}
	}
	return len(s.Spans) > 0
}

func anyTrue(b []bool) bool {
	for _, v := range b {
		if v {
			return true
		}
	}
	return false
}

// checkRecord validates one step record's slices.
func checkRecord(ep, step int, rec *rollout.StepRecord) error {
	if len(rec.Response) == 0 {
		return fmt.Errorf("%w: episode %d step %d has an empty response", ErrSamples, ep, step)
	}
	if len(rec.OldLogp) != len(rec.Response) {
		return fmt.Errorf("%w: episode %d step %d: %d old log-probs for %d response tokens", ErrSamples, ep, step, len(rec.OldLogp), len(rec.Response))
	}
	if len(rec.Prompt) == 0 {
		return fmt.Errorf("%w: episode %d step %d has an empty prompt", ErrSamples, ep, step)
	}
	if rec.NoTips != nil && len(rec.NoTips) == 0 {
		return fmt.Errorf("%w: episode %d step %d has an empty prompt without tips", ErrSamples, ep, step)
	}
	return nil
}

// episodeSamples builds the sequences of one episode, in its mode (see
// pack.go); adv[t] is step t's advantage.
func episodeSamples(ei int, ep *rollout.Episode, adv []float64, pack bool) ([]Sample, error) {
	mode := ep.Mode
	if len(adv) != len(ep.Steps) {
		return nil, fmt.Errorf("%w: episode %d: %d advantages for %d steps", ErrSamples, ei, len(adv), len(ep.Steps))
	}
	var out []Sample
	var cur *Sample
	for si := range ep.Steps {
		rec := &ep.Steps[si]
		if err := checkRecord(ei, si, rec); err != nil {
			return nil, err
		}
		prompt := trainPrompt(rec, mode)
		var beh []int32
		if mode == ModeOffPolicy && rec.NoTips != nil {
			beh = append(append([]int32(nil), rec.Prompt...), rec.Response...)
		}
		a := float32(adv[si])
		if pack && cur != nil && extends(prompt, cur.Seq.Tokens) {
			appendStep(cur, si, prompt, rec, a, beh)
			continue
		}
		if cur != nil {
			out = append(out, *cur)
		}
		cur = &Sample{Episode: ei, Mode: mode}
		appendStep(cur, si, prompt, rec, a, beh)
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out, nil
}
