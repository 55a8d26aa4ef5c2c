package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/stats"
	"github.com/empo2/empo2/internal/sysmem"
	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/runfiles"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// ErrTrain wraps failures of a training step.
var ErrTrain = errors.New("trainer: training step failed")

// Random streams: every random draw of step s comes from
// stepRNG(seed, s, stream), so a resumed run draws exactly what an
// uninterrupted one would.
const (
	streamMode uint64 = 1 + iota
	streamTasks
	streamJobs
	streamShuffle
	streamEval
)

// splitmix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom
// number generators") finalizer: a bijective mix of 64 bits.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// stepRNG is the random source of one (seed, step, stream).
func stepRNG(seed int64, step int, stream uint64) *rand.Rand {
	a := splitmix64(uint64(seed) ^ splitmix64(stream))
	b := splitmix64(uint64(step)*0x632be59bd9b4e019 + stream)
	return rand.New(rand.NewPCG(a, b))
}

// TaskVar is one task variation.
type TaskVar struct {
	Task      string
	Variation int
}

// TrainPool lists the (task, variation) pairs of split for the selected
// tasks (all tasks that are not held out when names is empty); a name
// "task/N" selects variation N alone, whatever its split.
func TrainPool(tasks []environments.Task, names []string, split environments.Split) ([]TaskVar, error) {
	var sel []environments.Task
	var out []TaskVar
	if len(names) == 0 {
		for _, t := range tasks {
			if !t.HeldOut {
				sel = append(sel, t)
			}
		}
	} else {
		for _, n := range names {
			n = strings.TrimSpace(n)
			// "task/variation" names one variation, whatever its split.
			if i := strings.LastIndex(n, "/"); i > 0 {
				if v, err := strconv.Atoi(n[i+1:]); err == nil {
					t, err := environments.FindTask(tasks, n[:i])
					if err == nil {
						err = environments.CheckVariation(t, v)
					}
					if err != nil {
						return nil, fmt.Errorf("%w: %w", ErrRunConfig, err)
					}
					out = append(out, TaskVar{t.Name, v})
					continue
				}
			}
			t, err := environments.FindTask(tasks, n)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrRunConfig, err)
			}
			sel = append(sel, t)
		}
	}
	for _, t := range sel {
		vs, err := t.VariationsIn(split)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			out = append(out, TaskVar{t.Name, v})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no %s variations for tasks %v", ErrRunConfig, split, names)
	}
	return out, nil
}

// PlanStep draws step's mode(s) and jobs: B task variations from pool
// (without replacement when B ≤ |pool|), G rollouts each (Group = the
// variation's index in the step), each job with its own sampling seed and
// its EMPO² mode (algo.DrawMode; all equal unless cfg.Mode.Per is
// PerRollout), which its episode carries on to the update.
func PlanStep(cfg *Config, pool []TaskVar, step int) (jobs []rollout.Job) {
	mr := stepRNG(cfg.Seed, step, streamMode)
	stepMode := algo.DrawMode(mr.Float64(), cfg.Mode.MemoryProb, cfg.Mode.OffPolicyProb)
	tr := stepRNG(cfg.Seed, step, streamTasks)
	B, G := cfg.Batch.Tasks, cfg.Batch.Rollouts
	picks := make([]TaskVar, B)
	if B <= len(pool) {
		perm := tr.Perm(len(pool))
		for b := range picks {
			picks[b] = pool[perm[b]]
		}
	} else {
		for b := range picks {
			picks[b] = pool[tr.IntN(len(pool))]
		}
	}
	jr := stepRNG(cfg.Seed, step, streamJobs)
	for b, tv := range picks {
		for g := 0; g < G; g++ {
			m := stepMode
			if cfg.Mode.Per == PerRollout {
				m = algo.DrawMode(mr.Float64(), cfg.Mode.MemoryProb, cfg.Mode.OffPolicyProb)
			}
			jobs = append(jobs, rollout.Job{Task: tv.Task, Variation: tv.Variation, Group: b,
				Seed: int64(jr.Uint64() >> 1), Mode: m})
		}
	}
	return jobs
}

// StepMetrics is one step's line of metrics.jsonl (the record
// runfiles.Metrics, which `empo2 report` reads), with the methods that
// gather it from the step's parts.
type StepMetrics struct {
	runfiles.Metrics
}

// newStepMetrics starts step's record: its jobs' mode(s) and seed.
func newStepMetrics(step int, cfg *Config, jobs []rollout.Job) StepMetrics {
	m := StepMetrics{runfiles.Metrics{Step: step, Mode: string(jobs[0].Mode), Seed: cfg.Seed}}
	if cfg.Mode.Per == PerRollout {
		m.Mode = string(ModeMixed)
		m.Modes = map[string]int{}
		for _, j := range jobs {
			m.Modes[string(j.Mode)]++
		}
	}
	return m
}

// addRollouts records the rollout engine's counters and throughput.
func (m *StepMetrics) addRollouts(rs rollout.Stats) {
	m.TRollout = rs.TRollout.Seconds()
	m.TEmbedRetrieve = rs.TEmbedRetrieve.Seconds()
	m.GenTokens, m.EnvSteps = rs.GenTokens, rs.EnvSteps
	m.PromptSeen, m.PromptDecoded, m.PromptUnique = rs.PromptTokensSeen, rs.PromptTokensDecoded, rs.PromptTokensUnique
	if s := rs.TRollout.Seconds(); s > 0 {
		m.RolloutTokPerS = float64(rs.GenTokens) / s
		m.EnvStepsPerS = float64(rs.EnvSteps) / s
	}
}

// addEpisodes records the means over the episodes (score, success as
// rollout.Succeeded decided it, reward R = reward_scale · score +
// intrinsic, intrinsic) and over their actions (tips retrieved).
func (m *StepMetrics) addEpisodes(eps []rollout.Episode, rewardScale float64) {
	var score, succ, reward, intrinsic, retrieved stats.Mean
	for i := range eps {
		ep := &eps[i]
		score.Add(ep.Score, 1)
		succ.Add(b2f(ep.Success), 1)
		reward.Add(EpisodeReward(ep, rewardScale), 1)
		intrinsic.Add(ep.Intrinsic, 1)
		for _, r := range ep.Steps {
			retrieved.Add(float64(r.Retrieved), 1)
		}
	}
	m.Episodes = len(eps)
	m.ScoreMean, m.SuccessRate, m.RewardMean, m.IntrinsicMean = score.Value(), succ.Value(), reward.Value(), intrinsic.Value()
	m.TipsRetrievedMean = retrieved.Value()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// addSamples records how the episodes became training samples.
func (m *StepMetrics) addSamples(st SampleStats) {
	m.MaskedSeqs += st.MaskedSteps
	m.SampleSteps = st.Steps
	m.ZeroVarGroups = st.ZeroVarGroups
	m.Sequences = st.Sequences
	m.SampleTokens, m.UnpackedTokens = st.SampleTokens, st.UnpackedTokens
}

// addUpdates records the optimizer steps' statistics.
func (m *StepMetrics) addUpdates(us UpdateSummary) {
	m.Loss, m.ClipFrac, m.ApproxKL, m.Entropy, m.GradNorm = us.Loss, us.ClipFrac, us.KL, us.Entropy, us.GradNorm
	m.LR, m.Updates = us.LR, us.Updates
	m.TrainedTokens = us.Tokens
	m.TOldLogp += us.TOldLogp
	m.LossScaleSkips = us.LossScaleSkips
}

// finish stamps the step's end and checks the update statistics.
func (m *StepMetrics) finish(t0 time.Time) error {
	m.TStep = time.Since(t0).Seconds()
	m.MaxRSSBytes = sysmem.PeakRSS()
	m.Time = time.Now().UTC().Format(time.RFC3339)
	for _, v := range []float64{m.Loss, m.ClipFrac, m.ApproxKL, m.Entropy, m.GradNorm} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: non-finite update statistic at step %d", ErrTrain, m.Step)
		}
	}
	return nil
}

// UpdateSummary aggregates the optimizer steps of one training step.
type UpdateSummary struct {
	First    optim.Metrics // the step's first update (on-policy: ratios exactly 1)
	Updates  int
	Loss     float64 // means over updates
	ClipFrac float64 // token-weighted means
	KL       float64
	Entropy  float64
	GradNorm float64
	LR       float64
	Tokens   int // trained tokens (first epoch)
	// TOldLogp: seconds spent recomputing the π_old that BuildSamples left
	// to the update (part of the caller's update time)
	TOldLogp float64
	// LossScaleSkips: graphs of the updates recomputed at a lower loss
	// scale after an overflow (optim.Metrics.LossScaleSkips, summed)
	LossScaleSkips int
}

// Progress is where a training step lies in its run, for the learning-rate
// schedule: step Step (1-based) of Steps. The zero value leaves the
// schedule to the update index (optim.Schedule.LR).
type Progress struct{ Step, Steps int }

// at is the run's progress at the j-th (0-based) of n optimizer steps
// planned in this training step: (Step − 1 + j/n)/Steps, so that the
// schedule counts the optimizer steps that really happen, however many a
// step takes — except in the last step, whose updates span its interval
// whole, (Steps − 1 + j/(n − 1))/Steps, so that the run's last update is at
// progress 1 and the cosine schedule ends at min_lr as its doc says (a last
// step of one update is at 1; a run of a single update at 0, its first).
// The run's first update is at 0 (base_lr).
func (p Progress) at(j, n int) float64 {
	if p.Steps <= 0 {
		return -1
	}
	n = max(n, 1)
	if p.Step >= p.Steps {
		switch {
		case n > 1:
			return (float64(p.Steps-1) + float64(j)/float64(n-1)) / float64(p.Steps)
		case p.Steps > 1:
			return 1
		}
	}
	return (float64(p.Step-1) + float64(j)/float64(n)) / float64(p.Steps)
}

// MiniBatching says how an epoch's samples are cut into mini-batches:
// Count > 0 cuts them into min(Count, samples) near-equal parts (sizes
// differ by at most one), else into parts of Size sequences (0: all in
// one).
type MiniBatching struct{ Size, Count int }

// cuts returns the end index of each mini-batch of an epoch of n samples.
func (b MiniBatching) cuts(n int) []int {
	var out []int
	if b.Count > 0 {
		k := min(b.Count, n)
		for i := 1; i <= k; i++ {
			out = append(out, i*n/k)
		}
		return out
	}
	mb := b.Size
	if mb <= 0 || mb > n {
		mb = n
	}
	for hi := mb; ; hi += mb {
		if hi >= n {
			return append(out, n)
		}
		out = append(out, hi)
	}
}

// RunUpdates runs epochs passes over the samples in mini-batches (mb),
// shuffled per epoch with rng; each update takes its learning rate at its
// progress in the run (Progress).
func RunUpdates(u *optim.Updater, samples []Sample, epochs int, mb MiniBatching, rng *rand.Rand, prog Progress) (UpdateSummary, error) {
	var s UpdateSummary
	if len(samples) == 0 {
		return s, nil
	}
	cuts := mb.cuts(len(samples))
	// miniBatches cuts an epoch's order into mini-batches, each sorted by
	// length: similar lengths in each micro-batch (padding to the longest
	// costs B·T² in attention); the mini-batch's loss is a mean over all
	// its trained tokens, so the order changes nothing but float summation
	// order.
	miniBatches := func(order []int) [][]int {
		var out [][]int
		lo := 0
		for _, hi := range cuts {
			idx := slices.Clone(order[lo:hi])
			lo = hi
			sort.SliceStable(idx, func(a, b int) bool { return len(samples[idx[a]].Seq.Tokens) < len(samples[idx[b]].Seq.Tokens) })
			out = append(out, idx)
		}
		return out
	}
	first := miniBatches(rng.Perm(len(samples)))
	// π_old deferred by BuildSamples: recomputed now, before any update, in
	// the first epoch's own micro-batches (recomputeOwnOld).
	if slices.ContainsFunc(samples, func(x Sample) bool { return x.oldDeferred }) {
		lp, ok := u.Policy.(ExactLogProber)
		if !ok {
			return s, fmt.Errorf("%w: π_old was left to the update, but the policy cannot compute it", ErrSamples)
		}
		t0 := time.Now()
		for _, idx := range first {
			if err := recomputeOwnOld(u, lp, samples, idx); err != nil {
				return s, err
			}
		}
		s.TOldLogp = time.Since(t0).Seconds()
		for i := range samples {
			samples[i].oldDeferred = false
		}
	}
	var loss, gradNorm, clip, kl, entropy stats.Mean
	planned, j := epochs*len(first), 0
	defer u.SetProgress(-1)
	for e := 0; e < epochs; e++ {
		batches := first
		if e > 0 {
			batches = miniBatches(rng.Perm(len(samples)))
		}
		for _, idx := range batches {
			batch := make([]cgo.Sequence, len(idx))
			for k, i := range idx {
				batch[k] = samples[i].Seq
			}
			u.SetProgress(prog.at(j, planned))
			j++
			m, err := u.Update(batch)
			if err != nil {
				return s, err
			}
			if m.Skipped {
				continue
			}
			if s.Updates == 0 {
				s.First = m
			}
			s.Updates++
			w := float64(m.Tokens)
			loss.Add(m.Loss, 1)
			gradNorm.Add(m.GradNorm, 1)
			clip.Add(m.ClipFrac, w)
			kl.Add(m.ApproxKL, w)
			entropy.Add(m.Entropy, w)
			s.LR = m.LR
			s.LossScaleSkips += m.LossScaleSkips
			if e == 0 {
				s.Tokens += m.Tokens
			}
		}
	}
	s.Loss, s.GradNorm = loss.Value(), gradNorm.Value()
	s.ClipFrac, s.KL, s.Entropy = clip.Value(), kl.Value(), entropy.Value()
	return s, nil
}

// StepRunner is what a training step needs from the rollout side
// (*Roller implements it).
type StepRunner interface {
	Run(ctx context.Context, jobs []rollout.Job) ([]rollout.Episode, rollout.Stats, error)
	WriteTips(ctx context.Context, eps []rollout.Episode, trainStep int64) (int, error)
}

// Loop runs training steps.
type Loop struct {
	Cfg     Config
	Runner  StepRunner
	Updater *optim.Updater // always set: it holds the adapter that checkpoints save
	Prober  LogProber      // the training model (old log-probs); nil with old_logp: rollout
	// Engine, when set, reports the training graph's compute buffers
	// (metrics' update_compute_bytes).
	Engine ComputeMeter
	Pool   []TaskVar // train split
}

// ComputeMeter is the training engine's compute-buffer accounting
// (*cgo.Model).
type ComputeMeter interface {
	MemoryBytes() cgo.MemoryStats
	ResetComputePeak() error
}

// Step runs training step `step` (1-based): plan, rollouts, tips, samples,
// updates. It returns the step's metrics; on error (including a cancelled
// ctx) the step is abandoned — the caller rolls the memory back to the last
// checkpoint.
func (l *Loop) Step(ctx context.Context, step int) (StepMetrics, error) {
	t0 := time.Now()
	cfg := &l.Cfg
	jobs := PlanStep(cfg, l.Pool, step)
	m := newStepMetrics(step, cfg, jobs)
	w := watch.From(ctx) // progress: the step's phases (the rollout engine counts episodes and tokens)
	w.Step(step, cfg.Steps)
	w.Phase(watch.Rollouts, len(jobs))
	eps, rs, err := l.Runner.Run(ctx, jobs)
	if err != nil {
		return m, fmt.Errorf("%w: rollouts: %w", ErrTrain, err)
	}
	if len(eps) != len(jobs) {
		return m, fmt.Errorf("%w: %d episodes for %d jobs", ErrTrain, len(eps), len(jobs))
	}
	m.addRollouts(rs)
	m.addEpisodes(eps, cfg.Advantage.RewardScale)
	m.EndReasons, m.Context = rollout.CountEnds(eps), cfg.Context
	if cfg.Memory.WriteTips {
		t := time.Now()
		w.Phase(watch.Tips, 0)
		if m.TipsWritten, err = l.Runner.WriteTips(ctx, eps, int64(step)); err != nil {
			return m, fmt.Errorf("%w: writing tips: %w", ErrTrain, err)
		}
		m.TTips = time.Since(t).Seconds()
		m.TipsTrueFrac, m.TipsWellFormedFrac = tipTruth(cfg.Env, eps)
	}
	if cfg.Mode.Update {
		if err := l.update(ctx, step, eps, &m); err != nil {
			return m, err
		}
	}
	return m, m.finish(t0)
}

// update turns the episodes into samples (GRPO advantages, the tip cut,
// masking, packing, π_old) and runs the PPO updates.
func (l *Loop) update(ctx context.Context, step int, eps []rollout.Episode, m *StepMetrics) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cfg := &l.Cfg
	if l.Engine != nil {
		if err := l.Engine.ResetComputePeak(); err != nil {
			return fmt.Errorf("%w: %w", ErrTrain, err)
		}
	}
	t := time.Now()
	var lp LogProber
	if cfg.Update.OldLogp == OldLogpRecompute {
		lp = l.Prober
		watch.From(ctx).Phase(watch.OldLogp, 0)
	}
	samples, st, err := BuildSamples(eps, cfg.SampleConfig(), lp, cfg.Update.MicroBatch)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTrain, err)
	}
	m.TOldLogp = time.Since(t).Seconds()
	m.addSamples(st)
	t = time.Now()
	watch.From(ctx).Phase(watch.Update, 0)
	us, err := RunUpdates(l.Updater, samples, cfg.Update.PPOEpochs,
		MiniBatching{Size: cfg.Update.MiniBatch, Count: cfg.Update.MiniBatches}, stepRNG(cfg.Seed, step, streamShuffle),
		Progress{Step: step, Steps: cfg.Steps})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTrain, err)
	}
	m.TUpdate = time.Since(t).Seconds() - us.TOldLogp
	m.addUpdates(us)
	if l.Engine != nil {
		m.UpdateComputeBytes = l.Engine.MemoryBytes().Compute
	}
	return nil
}
