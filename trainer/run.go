package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/sysmem"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// Run-directory files (`empo2 report` reads them).
const (
	ConfigFile  = "config.yaml"   // the resolved configuration (commented)
	MemoryFile  = "memory.db"     // the tips memory
	MetricsFile = "metrics.jsonl" // one StepMetrics per step
	EvalFile    = "eval.jsonl"    // one {"step", "memory_off", "memory_on"} per periodic eval
	rolloutLoRA = ".rollout-adapter.gguf"
)

// Errors of a run.
var (
	// ErrRunExists: the run directory already holds a run and --resume was not given.
	ErrRunExists = errors.New("trainer: run directory already holds a run (use --resume, or a new --run-dir)")
	// ErrNoRun: --resume on a directory without a run.
	ErrNoRun = errors.New("trainer: no run to resume")
)

// RunOptions configures Train.
type RunOptions struct {
	Dir    string
	Config Config // resolved; on Resume the caller passes the run's config.yaml (with --steps/--set applied)
	Resume bool
	// OnStep is called after every completed step (progress, logging).
	OnStep func(m StepMetrics)
	// OnEval is called after every periodic evaluation.
	OnEval func(line evaluate.Line)
	// OnStart is called once the run is set up: the first step to run and the last.
	OnStart func(first, last int)
	// OnEngine is called once the training engine's memory plan is made.
	OnEngine func(p EnginePlan)
}

// RunResult summarizes Train.
type RunResult struct {
	FirstStep, LastStep int  // steps run in this invocation (LastStep < FirstStep: none)
	Interrupted         bool // the context was cancelled; the run is resumable
	Checkpoint          string
}

// LoadRunConfig reads a run directory's config.yaml (strict) and applies sets.
func LoadRunConfig(dir string, sets []string) (Config, error) {
	p := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(p); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrNoRun, dir, err)
	}
	return LoadConfig(p, "", sets)
}

// Train runs (or resumes) a training run in opts.Dir; see docs/train.md.
//
// Order of writes per step k, which makes kill -9 at any moment safe: tips
// of step k (stamped k) → metrics line k → eval line k → checkpoint k →
// `latest`. On resume from checkpoint j every later trace is removed: tips
// stamped > j (memstore.DeleteAfterStep), metrics and eval lines with
// step > j. Every random draw of step k derives from (seed, k), so the
// resumed run repeats exactly what the lost steps would have done.
func Train(ctx context.Context, opts RunOptions) (res RunResult, err error) {
	cfg := opts.Config
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if cfg.Model == "" {
		return res, fmt.Errorf("%w: no model (-m FILE or model: in the config)", ErrRunConfig)
	}
	dir := opts.Dir
	if dir == "" {
		return res, fmt.Errorf("%w: no run directory", ErrRunConfig)
	}
	cfgPath := filepath.Join(dir, ConfigFile)
	_, statErr := os.Stat(cfgPath)
	switch {
	case !opts.Resume && statErr == nil:
		return res, fmt.Errorf("%w: %s", ErrRunExists, dir)
	case opts.Resume && statErr != nil:
		return res, fmt.Errorf("%w: %s has no %s", ErrNoRun, dir, ConfigFile)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	// A new run whose setup fails (bad model, missing simulator, …) leaves
	// no run behind, so that the same command can simply be repeated.
	started := false
	if !opts.Resume {
		defer func() {
			if err != nil && !started {
				for _, f := range []string{ConfigFile, MemoryFile, MemoryFile + "-wal", MemoryFile + "-shm", MetricsFile, rolloutLoRA} {
					_ = os.Remove(filepath.Join(dir, f))
				}
			}
		}()
	}
	var cbuf bytes.Buffer
	if err := PrintConfig(&cbuf, cfg); err != nil {
		return res, err
	}
	if err := optim.WriteFileAtomic(cfgPath, cbuf.Bytes()); err != nil {
		return res, err
	}

	threads := cfg.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	gpuLayers := 0
	if cfg.Device == "gpu" || cfg.Device == "auto" {
		gpuLayers = -1
	}
	mem, _ := sysmem.Available() // unknown (zero) off Linux
	lm, err := llama.LoadModel(cfg.Model, llama.ModelParams{GPULayers: gpuLayers})
	if err != nil {
		return res, err
	}
	defer lm.Close()
	// The training engine reads llama.cpp's loaded weights (one copy of the
	// base model in memory; only Wᵀ copies, LoRA state and buffers are
	// added), sized to the memory available (EnginePlan).
	plan, err := planEngine(cfg, lm, mem)
	if err != nil {
		return res, err
	}
	if opts.OnEngine != nil {
		opts.OnEngine(plan)
	}
	defer func() { err = plan.explain(err) }()
	policy, err := cgo.LoadShared(lm, cgo.LoRAConfig{Rank: cfg.LoRA.Rank, Alpha: cfg.LoRA.Alpha, Targets: cfg.LoRA.Targets, Seed: cfg.Seed},
		plan.Options(threads, cfg.Device))
	if err != nil {
		return res, err
	}
	defer policy.Close()
	// Training sequences (a packed episode is its last prompt and
	// response) must fit the model's context.
	if mc := policy.Info().NCtxTrain; mc > 0 && cfg.Context > mc {
		cfg.Context = mc
	}
	ucfg, err := cfg.UpdaterConfig()
	if err != nil {
		return res, err
	}
	u, err := optim.NewUpdater(policy, ucfg)
	if err != nil {
		return res, err
	}
	start := 0
	if opts.Resume {
		info, ok, err := optim.LatestCheckpoint(dir)
		if err != nil {
			return res, err
		}
		if ok {
			s, err := optim.Load(filepath.Join(info.Dir, optim.StateFile))
			if err != nil {
				return res, fmt.Errorf("%w: %w", optim.ErrCheckpoint, err)
			}
			if err := u.Restore(s); err != nil {
				return res, fmt.Errorf("%w: %w", optim.ErrCheckpoint, err)
			}
			start = info.Step
		}
	}
	if start == 0 && cfg.LoRA.Init != "" {
		a, err := lora.Read(cfg.LoRA.Init)
		if err != nil {
			return res, err
		}
		if err := u.LoadAdapter(a); err != nil {
			return res, err
		}
	}
	// The rollout side: llama.cpp with the same adapter loaded once; every
	// update overwrites its tensors in place (Updater sink), no reload.
	a, err := u.Adapter()
	if err != nil {
		return res, err
	}
	rpath := filepath.Join(dir, rolloutLoRA)
	if err := a.Write(rpath, gguf.TypeF32); err != nil {
		return res, err
	}
	ad, err := lm.LoadAdapter(rpath)
	if err != nil {
		return res, err
	}
	defer ad.Close()
	nseq := cfg.Batch.Tasks * cfg.Batch.Rollouts
	lctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: cfg.Context, NSeqMax: nseq, Threads: threads})
	if err != nil {
		return res, err
	}
	defer lctx.Close()
	if err := lctx.SetAdapter(ad, 1); err != nil {
		return res, err
	}
	u.Sinks = []optim.TensorSink{ad}

	emb, closeEmb, err := rollout.OpenEmbedder(cfg.Memory.Embedder, lm, threads)
	if err != nil {
		return res, err
	}
	defer closeEmb()
	store, err := memstore.Open(filepath.Join(dir, MemoryFile), emb, memstore.WithCap(cfg.Memory.Cap))
	if err != nil {
		return res, err
	}
	defer store.Close()
	// Roll every trace of steps after the checkpoint back.
	if _, err := store.DeleteAfterStep(ctx, int64(start)); err != nil {
		return res, err
	}
	if err := truncateJSONL(filepath.Join(dir, MetricsFile), start); err != nil {
		return res, err
	}
	if err := truncateJSONL(filepath.Join(dir, EvalFile), start); err != nil {
		return res, err
	}

	// One instance per parallel episode (ScienceWorld: one JVM each), made
	// once and reused by every step.
	pool, err := environments.NewPool(cfg.Env, cfg.EnvOptions, nseq)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	roller, err := rollout.NewRoller(lctx, cfg.Rollout, rollout.Options{Env: cfg.Env, EnvOptions: cfg.EnvOptions, Pool: pool,
		Memory: store, MemoryConfig: cfg.Memory, Seed: cfg.Seed})
	if err != nil {
		return res, err
	}
	tasks := roller.Tasks()
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Name < tasks[j].Name })
	trainPool, err := TrainPool(tasks, cfg.Tasks, environments.Train)
	if err != nil {
		return res, err
	}
	loop := &Loop{Cfg: cfg, Runner: roller, Updater: u, Prober: policy, Pool: trainPool}

	mf, err := os.OpenFile(filepath.Join(dir, MetricsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return res, err
	}
	defer mf.Close()
	res.FirstStep, res.LastStep = start+1, start
	if opts.OnStart != nil {
		opts.OnStart(start+1, cfg.Steps)
	}
	lastCkpt := start
	started = true
	checkpoint := func(step int) error {
		p, err := optim.WriteCheckpoint(dir, step, cfg.Seed, u, cfg.Checkpoint.Keep)
		if err != nil {
			return err
		}
		res.Checkpoint, lastCkpt = p, step
		return nil
	}
	for step := start + 1; step <= cfg.Steps; step++ {
		if ctx.Err() != nil {
			break
		}
		m, err := loop.Step(ctx, step)
		if err != nil {
			if ctx.Err() != nil { // interrupted: abandon the step
				break
			}
			return res, err
		}
		if err := appendJSONL(mf, m); err != nil {
			return res, err
		}
		res.LastStep = step
		if opts.OnStep != nil {
			opts.OnStep(m)
		}
		if cfg.Eval.Every > 0 && step%cfg.Eval.Every == 0 {
			line, err := periodicEval(ctx, roller, &cfg, step)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				return res, err
			}
			if err := appendEvalLine(filepath.Join(dir, EvalFile), line); err != nil {
				return res, err
			}
			if opts.OnEval != nil {
				opts.OnEval(line)
			}
		}
		if step == cfg.Steps || (cfg.Checkpoint.Every > 0 && step%cfg.Checkpoint.Every == 0) {
			if err := checkpoint(step); err != nil {
				return res, err
			}
		}
	}
	if ctx.Err() != nil {
		res.Interrupted = true
	}
	// Interrupted (or checkpoint.every skipped the last steps): checkpoint
	// the last completed step, and drop the traces of an abandoned one.
	bg := context.WithoutCancel(ctx)
	if res.LastStep > lastCkpt {
		if err := checkpoint(res.LastStep); err != nil {
			return res, err
		}
	}
	if _, err := store.DeleteAfterStep(bg, int64(lastCkpt)); err != nil {
		return res, err
	}
	_ = os.Remove(rpath)
	return res, nil
}

// appendJSONL writes v as one line and fsyncs.
func appendJSONL(f *os.File, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return err
	}
	return f.Sync()
}

// truncateJSONL keeps the lines of path whose "step" is ≤ step (and drops a
// torn last line), rewriting the file atomically when anything changes. A
// missing file is fine.
func truncateJSONL(path string, step int) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var keep bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var s struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal(line, &s) != nil || s.Step == nil || *s.Step > step {
			continue
		}
		keep.Write(line)
		keep.WriteByte('\n')
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if bytes.Equal(keep.Bytes(), b) {
		return nil
	}
	return optim.WriteFileAtomic(path, keep.Bytes())
}
