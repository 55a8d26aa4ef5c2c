package evaluate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/internal/stats"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/runfiles"
	"github.com/empo2/empo2/trainer/rollout"
)

// Offline evaluation: the same rollout engine as training (batched,
// per-episode KV reuse), at the validation temperature, with memory off,
// on, or both on exactly the same jobs and seeds, so that the two settings
// differ only in the tip blocks of their prompts; and OOD adaptation
// trials (EvaluateOOD): consecutive attempts at held-out tasks with a fresh
// memory and no weight updates.

// ErrEval: an invalid evaluation request.
var ErrEval = errors.New("trainer: eval")

// MemorySetting says whether evaluation episodes retrieve tips.
type MemorySetting string

// Memory settings of an evaluation.
const (
	MemoryOff  MemorySetting = "off"  // no tips
	MemoryOn   MemorySetting = "on"   // tips retrieved from the memory
	MemoryBoth MemorySetting = "both" // off and on, same jobs and seeds
)

// Valid reports whether m is a known setting.
func (m MemorySetting) Valid() bool { return m == MemoryOff || m == MemoryOn || m == MemoryBoth }

// Protocol is what an evaluation plays: its YAML keys are the `eval`
// section of a run configuration (with `every`, Config) and of `empo2
// eval`'s configuration (RunConfig).
type Protocol struct {
	Episodes      int                `yaml:"episodes" doc:"episodes per task variation"`
	MaxVariations int                `yaml:"max_variations" doc:"the first N variations of the split per task; 0 = all"`
	Split         environments.Split `yaml:"split" doc:"split evaluated: dev | test | train"`
	Temperature   float64            `yaml:"temperature" doc:"sampling temperature of evaluation; 0 = greedy"` // used as given
	Memory        MemorySetting      `yaml:"memory" doc:"off | on | both"`
}

// Config configures Evaluate. Its YAML keys are the `eval` section of a
// run configuration (the periodic evaluation of training, Periodic); the
// untagged fields are set by the caller. Zero Split, Episodes and Memory
// take test, 1 and off in Evaluate. Success is the roller's
// (rollout.Succeeded with its rollout.success_score).
type Config struct {
	Every    int `yaml:"every" doc:"evaluate every N steps; 0 = never"`
	Protocol `yaml:",inline"`

	Tasks []string `yaml:"-"` // task names; empty = every task not held out
	Seed  int64    `yaml:"-"`
	// WriteTips makes memory-on episodes write tips (stamped TrainStep)
	// into the roller's memory; otherwise eval never changes the memory.
	WriteTips bool  `yaml:"-"`
	TrainStep int64 `yaml:"-"`
	// Plan, when set, is told what will be played before the first episode.
	Plan func(Plan) `yaml:"-"`
	// Progress, when set, is called after every finished episode.
	Progress func(done, total int) `yaml:"-"`
}

// DefaultConfig is the periodic evaluation of a training run: never (every
// 0), 1 episode of each of the first 2 dev variations per task, at the
// reference's validation temperature 0.4, memory off and on.
func DefaultConfig() Config {
	return Config{Every: 0, Protocol: Protocol{Episodes: 1, MaxVariations: 2, Split: environments.Dev, Temperature: 0.4, Memory: MemoryBoth}}
}

// TaskResult is one task's (or the overall) result (the run-files record).
type TaskResult = runfiles.TaskResult

// Result is one memory setting's result: overall and per task (the JSON
// object of `empo2 eval --json`, one per memory setting; runfiles.EvalResult).
type Result = runfiles.EvalResult

// Report is Evaluate's result; `empo2 eval --json` writes its record
// (runfiles.EvalReport).
type Report struct {
	runfiles.EvalReport
	// Stats: rollout counters over both settings.
	Stats rollout.Stats `json:"-"`
	// Episodes per setting (for callers that look at the trajectories).
	OffEpisodes []rollout.Episode `json:"-"`
	OnEpisodes  []rollout.Episode `json:"-"`
}

// evalSeed derives a job's seed from the eval seed and its identity.
func evalSeed(seed int64, parts ...any) int64 {
	h := fnv.New64a()
	fmt.Fprint(h, seed)
	for _, p := range parts {
		fmt.Fprint(h, "/", p)
	}
	return int64(h.Sum64() >> 1)
}

// evalTasks resolves task names (empty: the tasks that are not held out).
func evalTasks(r *rollout.Roller, names []string, heldOut bool) ([]environments.Task, error) {
	all := r.Tasks()
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	if len(names) == 0 {
		var out []environments.Task
		for _, t := range all {
			if t.HeldOut == heldOut {
				out = append(out, t)
			}
		}
		if len(out) == 0 {
			kind := "not held out"
			if heldOut {
				kind = "held out"
			}
			return nil, fmt.Errorf("%w: the environment has no tasks that are %s; name them with --tasks", ErrEval, kind)
		}
		return out, nil
	}
	out := make([]environments.Task, 0, len(names))
	for _, n := range names {
		t, err := environments.FindTask(all, strings.TrimSpace(n))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// evalJobs lists the variations of tasks in split (at most maxVars each).
func evalVariations(tasks []environments.Task, split environments.Split, maxVars int) ([][2]any, error) {
	var out [][2]any
	for _, t := range tasks {
		vars, err := t.VariationsIn(split)
		if err != nil {
			return nil, err
		}
		if maxVars > 0 && len(vars) > maxVars {
			vars = vars[:maxVars]
		}
		if len(vars) == 0 {
			return nil, fmt.Errorf("%w: task %s has no %s variations", ErrEval, t.Name, split)
		}
		for _, v := range vars {
			out = append(out, [2]any{t.Name, v})
		}
	}
	return out, nil
}

// newPlan is the plan of vars (task, variation pairs) of tasks in split.
func newPlan(split environments.Split, tasks []environments.Task, vars [][2]any) Plan {
	p := Plan{Split: split, Variations: len(vars)}
	for _, t := range tasks {
		p.Tasks = append(p.Tasks, t.Name)
	}
	if len(vars) > 0 {
		p.firstVariation = vars[0][1].(int)
	}
	return p
}

// Evaluate plays cfg.Episodes episodes per task variation with memory off
// and/or on (the same jobs and seeds for both) and summarizes them.
func Evaluate(ctx context.Context, r *rollout.Roller, cfg Config) (*Report, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil roller", ErrEval)
	}
	if cfg.Split == "" {
		cfg.Split = environments.Test
	}
	if cfg.Episodes == 0 {
		cfg.Episodes = 1
	}
	if cfg.Memory == "" {
		cfg.Memory = MemoryOff
	}
	switch {
	case cfg.Episodes < 0 || cfg.MaxVariations < 0:
		return nil, fmt.Errorf("%w: negative episodes or variations", ErrEval)
	case !cfg.Memory.Valid():
		return nil, fmt.Errorf("%w: memory %q (want off, on or both)", ErrEval, cfg.Memory)
	case cfg.Memory != MemoryOff && r.Memory() == nil:
		return nil, fmt.Errorf("%w: memory %s needs a memory database", rollout.ErrNoMemory, cfg.Memory)
	case cfg.Temperature < 0 || cfg.Temperature > 100:
		return nil, fmt.Errorf("%w: temperature %v", ErrEval, cfg.Temperature)
	}
	tasks, err := evalTasks(r, cfg.Tasks, false)
	if err != nil {
		return nil, err
	}
	vars, err := evalVariations(tasks, cfg.Split, cfg.MaxVariations)
	if err != nil {
		return nil, err
	}
	var jobs []rollout.Job
	for g, tv := range vars {
		for e := 0; e < cfg.Episodes; e++ {
			task, v := tv[0].(string), tv[1].(int)
			jobs = append(jobs, rollout.Job{Task: task, Variation: v, Group: g, Seed: evalSeed(cfg.Seed, task, v, e)})
		}
	}
	rep := &Report{EvalReport: runfiles.EvalReport{Split: string(cfg.Split), Temperature: cfg.Temperature, Seed: cfg.Seed}}
	settings := []bool{false, true}
	switch cfg.Memory {
	case MemoryOff:
		settings = []bool{false}
	case MemoryOn:
		settings = []bool{true}
	}
	total := len(jobs) * len(settings)
	if cfg.Plan != nil {
		p := newPlan(cfg.Split, tasks, vars)
		p.Episodes, p.Total = cfg.Episodes, total
		for _, on := range settings {
			p.Settings = append(p.Settings, map[bool]MemorySetting{false: MemoryOff, true: MemoryOn}[on])
		}
		cfg.Plan(p)
	}
	done := 0
	for _, on := range settings {
		rr := r.WithTemperature(cfg.Temperature).WithMemory(r.Memory(), !cfg.WriteTips).WithProgress(nil)
		base := done
		if cfg.Progress != nil {
			rr = rr.WithProgress(func(d, _ int) { cfg.Progress(base+d, total) })
		}
		js := append([]rollout.Job(nil), jobs...)
		for i := range js {
			js[i].Mode = algo.RolloutMode(on)
		}
		eps, st, err := rr.Run(ctx, js)
		if err != nil {
			return nil, err
		}
		done += len(js)
		rep.Stats.Add(st)
		if on && cfg.WriteTips {
			if _, err := rr.WriteTips(ctx, eps, cfg.TrainStep); err != nil {
				return nil, err
			}
		}
		res := summarize(eps)
		if on {
			rep.MemoryOn, rep.OnEpisodes = res, eps
		} else {
			rep.MemoryOff, rep.OffEpisodes = res, eps
		}
	}
	return rep, nil
}

// summarize computes the mean score, success rate (Episode.Success, as
// rollout.Succeeded decided it) and steps, overall and per task.
func summarize(eps []rollout.Episode) *Result {
	type means struct{ score, succ, steps stats.Mean }
	all, per := &means{}, map[string]*means{}
	var retrieved stats.Mean
	for i := range eps {
		ep := &eps[i]
		if per[ep.Task] == nil {
			per[ep.Task] = &means{}
		}
		ok := 0.0
		if ep.Success {
			ok = 1
		}
		for _, m := range []*means{all, per[ep.Task]} {
			m.score.Add(ep.Score, 1)
			m.steps.Add(float64(len(ep.Steps)), 1)
			m.succ.Add(ok, 1)
		}
		for _, s := range ep.Steps {
			retrieved.Add(float64(s.Retrieved), 1)
		}
	}
	result := func(m *means) TaskResult {
		return TaskResult{ScoreMean: m.score.Value(), SuccessRate: m.succ.Value(), Episodes: int(m.score.Weight()), StepsMean: m.steps.Value()}
	}
	res := &Result{TaskResult: result(all), Tasks: map[string]TaskResult{}, TipsRetrievedMean: retrieved.Value(), EndReasons: rollout.CountEnds(eps)}
	for k, m := range per {
		res.Tasks[k] = result(m)
	}
	return res
}

// OODConfig configures EvaluateOOD.
type OODConfig struct {
	Tasks         []string           // empty = the environment's held-out tasks
	Split         environments.Split // variations from this split ("" = test)
	MaxVariations int                // per task (0 = all)
	Trials        int                // K consecutive trials per variation (0 = 3)
	Temperature   float64            // used as given (the CLI's default: 0.4)
	Seed          int64
	// Embedder of the fresh memory (nil: the hash embedder).
	Embedder memstore.Embedder
	// Dir holds the fresh memory database ("" = a temporary directory,
	// removed afterwards).
	Dir      string
	Plan     func(Plan) // told what will be played before the first trial
	Progress func(done, total int)
	// Episodes, when set, receives each trial's episodes (after their tips
	// are written) per setting; k is the 1-based trial.
	Episodes func(setting MemorySetting, k int, eps []rollout.Episode) error
}

// OODSeries is one setting's trial curve (the run-files record).
type OODSeries = runfiles.OODSeries

// OODReport is EvaluateOOD's result (the run-files record).
type OODReport = runfiles.OODReport

// EvaluateOOD runs K consecutive trials per held-out variation with memory
// on and no weight updates: before trial k+1 every variation's trial-k
// episode writes one tip into a fresh memory (the roller's own memory is
// never touched), and the same trials without memory serve as the control.
// Trial k of a variation uses the same seed in both settings.
func EvaluateOOD(ctx context.Context, r *rollout.Roller, cfg OODConfig) (*OODReport, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil roller", ErrEval)
	}
	if cfg.Split == "" {
		cfg.Split = environments.Test
	}
	if cfg.Trials == 0 {
		cfg.Trials = 3
	}
	if cfg.Trials < 1 || cfg.Trials > maxTrials {
		return nil, fmt.Errorf("%w: trials %d: want 1..%d (each trial is a full pass over the held-out variations)", ErrEval, cfg.Trials, maxTrials)
	}
	if cfg.MaxVariations < 0 {
		return nil, fmt.Errorf("%w: variations %d: want ≥ 0 (0 = all)", ErrEval, cfg.MaxVariations)
	}
	tasks, err := evalTasks(r, cfg.Tasks, true)
	if err != nil {
		return nil, err
	}
	vars, err := evalVariations(tasks, cfg.Split, cfg.MaxVariations)
	if err != nil {
		return nil, err
	}
	if cfg.Plan != nil {
		p := newPlan(cfg.Split, tasks, vars)
		p.Episodes, p.Trials, p.Total = 1, cfg.Trials, 2*cfg.Trials*len(vars)
		p.Settings = []MemorySetting{MemoryOn, MemoryOff}
		cfg.Plan(p)
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "empo2-ood-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	emb := cfg.Embedder
	if emb == nil {
		emb = memstore.NewHashEmbedder(memstore.DefaultDim)
	}
	store, err := memstore.Open(filepath.Join(dir, "ood-memory.db"), emb)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if len(store.Namespaces()) > 0 {
		return nil, fmt.Errorf("%w: the OOD memory %s is not empty", ErrEval, filepath.Join(dir, "ood-memory.db"))
	}
	rep := &OODReport{Variations: len(vars), Trials: cfg.Trials}
	for _, t := range tasks {
		rep.Tasks = append(rep.Tasks, t.Name)
	}
	// trial k of both settings runs as one batch: the control does not
	// depend on the tips, so its episodes ride along the memory ones
	total := 2 * cfg.Trials * len(vars)
	rr := r.WithTemperature(cfg.Temperature).WithMemory(store, false)
	for k := 0; k < cfg.Trials; k++ {
		base := k * 2 * len(vars)
		rr = rr.WithProgress(nil)
		if cfg.Progress != nil {
			rr = rr.WithProgress(func(d, _ int) { cfg.Progress(base+d, total) })
		}
		jobs := make([]rollout.Job, 0, 2*len(vars))
		for _, on := range []bool{true, false} {
			for g, tv := range vars {
				task, v := tv[0].(string), tv[1].(int)
				jobs = append(jobs, rollout.Job{Task: task, Variation: v, Group: g, Seed: evalSeed(cfg.Seed, "ood", task, v, k), Mode: algo.RolloutMode(on)})
			}
		}
		eps, _, err := rr.Run(ctx, jobs)
		if err != nil {
			return nil, err
		}
		onEps, offEps := eps[:len(vars)], eps[len(vars):]
		if _, err := rr.WriteTips(ctx, onEps, int64(k+1)); err != nil {
			return nil, err
		}
		if cfg.Episodes != nil {
			if err := cfg.Episodes(MemoryOn, k+1, onEps); err != nil {
				return nil, err
			}
			if err := cfg.Episodes(MemoryOff, k+1, offEps); err != nil {
				return nil, err
			}
		}
		tips := 0
		for _, ep := range onEps {
			if ep.Tip != "" {
				tips++
			}
		}
		for i, part := range [][]rollout.Episode{onEps, offEps} {
			ser := &rep.MemoryOn
			if i == 1 {
				ser, tips = &rep.MemoryOff, 0
			}
			res := summarize(part)
			ser.ScorePerTrial = append(ser.ScorePerTrial, res.ScoreMean)
			ser.SuccessPerTrial = append(ser.SuccessPerTrial, res.SuccessRate)
			ser.TipsPerTrial = append(ser.TipsPerTrial, tips)
		}
	}
	for _, ser := range []*OODSeries{&rep.MemoryOn, &rep.MemoryOff} {
		first, last := ser.ScorePerTrial[0], ser.ScorePerTrial[cfg.Trials-1]
		ser.Improvement = last - first
		if first != 0 {
			ser.ImprovementPct = 100 * ser.Improvement / math.Abs(first)
		}
	}
	return rep, nil
}
