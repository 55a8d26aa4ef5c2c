package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/internal/sysmem"
	"github.com/empo2/empo2/internal/tfevents"
	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/runfiles"
	"github.com/empo2/empo2/trainer/demos"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// Run-directory files (runfiles names them all; `empo2 report` reads them).
const (
	ConfigFile  = runfiles.ConfigFile  // the resolved configuration (commented)
	MemoryFile  = runfiles.MemoryFile  // the tips memory
	MetricsFile = runfiles.MetricsFile // one StepMetrics per step
	EvalFile    = runfiles.EvalFile    // one evaluate.Line per periodic eval
	RunFile     = runfiles.RunFile     // the marker: a run that train made
)

// Errors of a run.
var (
	// ErrRunExists: the run directory already holds a run and --resume was not given.
	ErrRunExists = errors.New("trainer: run directory already holds a run (use --resume, or a new --run-dir)")
	// ErrNoRun: --resume on a directory without a run.
	ErrNoRun = errors.New("trainer: no run to resume")
	// ErrRunDir: the directory holds files that are not a run train made;
	// nothing in it is written or removed.
	ErrRunDir = errors.New("trainer: not a run directory of train")
	// ErrRunInUse: another process holds the run directory's lock.
	ErrRunInUse = errors.New("trainer: run directory in use")
	// ErrRunState: a file of the run is missing or damaged; the message
	// names it and says how to recover.
	ErrRunState = errors.New("trainer: damaged run")
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
	// Checkpoint is the checkpoint the run stands at: the last one this
	// invocation wrote, else the one it resumed from ("" for none).
	Checkpoint string
	// Updates counts the optimizer steps of this invocation; Groups the
	// GRPO groups (task variations) it trained on and ZeroVarGroups those
	// whose episodes all had the same reward (no advantage, nothing to learn).
	Updates, Groups, ZeroVarGroups int
}

// add counts a step's updates and groups.
func (r *RunResult) add(m StepMetrics, groups int) {
	r.Updates += m.Updates
	r.ZeroVarGroups += m.ZeroVarGroups
	r.Groups += groups
}

// LoadRunConfig reads a run directory's config.yaml (strict) and applies sets.
func LoadRunConfig(dir string, sets []string) (Config, error) {
	p := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrNoRun, dir, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return Config{}, fmt.Errorf("%w: the run's %s is empty: its configuration is lost (the file was emptied or damaged); recover: restore it from a backup (train wrote it when the run began, with the model, env, tasks and every setting)",
			ErrRunState, p)
	}
	return LoadConfig(p, "", sets)
}

// Train runs (or resumes) a training run in opts.Dir; see docs/train.md.
//
// Nothing is written before everything is checked: the configuration,
// the directory (a new run needs a missing or empty one; a resume needs
// the run's marker and intact state, see checkResume), the model, the
// adapter, the embedder, the environment and the first prompt's length.
// The directory is locked for the run's life (a second train on it is
// refused); a new run whose setup fails removes what it created.
//
// Order of writes per step k, which makes kill -9 at any moment safe: tips
// of step k (stamped k) → metrics line k → eval line k → checkpoint k →
// `latest`. On resume from checkpoint j every later trace is removed: tips
// stamped > j (memstore.DeleteAfterStep), metrics and eval lines with
// step > j. Every random draw of step k derives from (seed, k), so the
// resumed run repeats exactly what the lost steps would have done.
func Train(ctx context.Context, opts RunOptions) (RunResult, error) {
	r, err := openRun(ctx, opts)
	if err != nil {
		return RunResult{}, err
	}
	res, err := r.run(ctx, opts)
	err = r.plan.explain(err) // a compute-cap error says how the engine was sized
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return res, err
}

// run is an open training run: the locked directory and every resource of
// the loop, released by Close.
type run struct {
	dir    string
	cfg    Config // as used: the context clamped to the model's
	start  int    // the step of the checkpoint the run starts from (0: none)
	ckpt   string // that checkpoint's folder
	loop   *Loop
	roller *rollout.Roller // with the memory once it is open
	emb    memstore.Embedder
	store  *memstore.Store
	mf     *os.File         // metrics.jsonl, appended
	tb     *tfevents.RunLog // the TensorBoard event file (nil: logging.tensorboard false)
	// keep: the metrics.jsonl and eval.jsonl lines a resume keeps (nil: the
	// file is kept as it is)
	keepMetrics, keepEval []byte
	// created: what this invocation created, removed when its setup fails
	created []string
	closers []func() error // in opening order; Close runs them backwards
	lock    *safefile.Lock
	plan    EnginePlan // how the training engine was sized
}

// Close releases every resource, then the lock. Idempotent.
func (r *run) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i]())
	}
	r.closers = nil
	errs = append(errs, r.lock.Close())
	r.lock = nil
	return errors.Join(errs...)
}

func (r *run) onClose(f func() error) { r.closers = append(r.closers, f) }

// discard closes a run whose setup failed and removes what it created.
func (r *run) discard() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		_ = r.closers[i]()
	}
	r.closers = nil
	for i := len(r.created) - 1; i >= 0; i-- {
		_ = os.Remove(r.created[i]) // a folder only when empty
	}
	_ = r.lock.Close()
	r.lock = nil
}

// openRun checks everything, then opens the run; see Train.
func openRun(ctx context.Context, opts RunOptions) (_ *run, err error) {
	cfg := opts.Config
	if err := prepareConfig(&cfg, opts.Dir); err != nil {
		return nil, err
	}
	r := &run{dir: opts.Dir}
	defer func() {
		if err != nil {
			r.discard()
		}
	}()
	if err := r.lockDir(opts.Resume); err != nil {
		return r, err
	}
	var state *optim.State
	var model runfiles.ModelID
	if opts.Resume {
		if state, model, err = r.checkResume(&cfg); err != nil {
			return r, err
		}
	} else {
		if err := r.checkEmpty(); err != nil {
			return r, err
		}
		if model, err = runfiles.Fingerprint(cfg.Model); err != nil {
			return r, fmt.Errorf("%w: model %s: %w", ErrRunConfig, cfg.Model, err)
		}
	}
	var cbuf bytes.Buffer
	if err := PrintConfig(&cbuf, cfg); err != nil {
		return r, err
	}
	if err := r.openResources(ctx, &cfg, state, opts.OnEngine); err != nil {
		return r, r.plan.explain(err)
	}
	// Everything is checked: write.
	if !opts.Resume {
		mark := runfiles.Run{Format: runfiles.RunFormat, Created: time.Now().UTC(), Model: model}
		if err := r.writeNew(RunFile, mark.Marshal()); err != nil {
			return r, err
		}
		if err := r.writeNew(ConfigFile, cbuf.Bytes()); err != nil {
			return r, err
		}
		for _, f := range []string{MemoryFile, MemoryFile + "-wal", MemoryFile + "-shm"} {
			r.created = append(r.created, filepath.Join(r.dir, f))
		}
	}
	store, err := memstore.Open(filepath.Join(r.dir, MemoryFile), r.emb, memstore.WithCap(cfg.Memory.Cap))
	if err != nil {
		return r, err
	}
	r.onClose(store.Close)
	r.store = store
	if opts.Resume {
		if err := safefile.WriteFile(filepath.Join(r.dir, ConfigFile), cbuf.Bytes(), 0o644); err != nil {
			return r, err
		}
		if err := r.rollBack(ctx); err != nil {
			return r, err
		}
	}
	r.roller = r.roller.WithMemory(store, false)
	r.loop.Runner = r.roller
	mp := filepath.Join(r.dir, MetricsFile)
	if _, serr := os.Stat(mp); serr != nil {
		r.created = append(r.created, mp)
	}
	if r.mf, err = os.OpenFile(mp, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return r, err
	}
	r.onClose(r.mf.Close)
	if cfg.Logging.TensorBoard { // rewritten from the (rolled-back) JSONL files: one value per step
		if r.tb, err = tfevents.OpenRun(r.dir); err != nil {
			return r, err
		}
		r.created = append(r.created, r.tb.Path())
		r.onClose(r.tb.Close)
	}
	return r, nil
}

// writeNew writes a file the new run creates (it did not exist: the
// directory was empty).
func (r *run) writeNew(name string, b []byte) error {
	r.created = append(r.created, filepath.Join(r.dir, name))
	return safefile.WriteFile(filepath.Join(r.dir, name), b, 0o644)
}

// prepareConfig validates cfg and makes its file paths absolute, so that
// config.yaml names the same files from any working directory.
func prepareConfig(cfg *Config, dir string) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Model == "" {
		return fmt.Errorf("%w: no model (-m FILE or model: in the config)", ErrRunConfig)
	}
	if dir == "" {
		return fmt.Errorf("%w: no run directory", ErrRunConfig)
	}
	abs := func(p *string) error {
		if *p == "" {
			return nil
		}
		a, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrRunConfig, *p, err)
		}
		*p = a
		return nil
	}
	paths := []*string{&cfg.Model, &cfg.LoRA.Init, &cfg.EnvOptions.Jar, &cfg.EnvOptions.DataDir}
	if e := cfg.Memory.Embedder; e != rollout.EmbedderHash && e != rollout.EmbedderPolicy {
		paths = append(paths, &cfg.Memory.Embedder)
	}
	for _, p := range paths {
		if err := abs(p); err != nil {
			return err
		}
	}
	return nil
}

// lockDir takes the directory's lock, creating the directory (and its
// missing parents, recorded as created) for a new run.
func (r *run) lockDir(resume bool) error {
	if !resume {
		var missing []string
		for d := filepath.Clean(r.dir); ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
				break
			}
			missing = append(missing, d)
		}
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			return err
		}
		for i := len(missing) - 1; i >= 0; i-- {
			r.created = append(r.created, missing[i])
		}
	}
	fi, err := os.Stat(r.dir)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNoRun, r.dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrRunDir, r.dir)
	}
	l, err := safefile.TryLock(r.dir)
	if err != nil {
		if errors.Is(err, safefile.ErrLocked) {
			return fmt.Errorf("%w: %s is in use by another empo2 train (it holds the directory's lock until it exits)", ErrRunInUse, r.dir)
		}
		return err
	}
	r.lock = l
	return nil
}

// checkEmpty refuses a new run in a directory that holds anything: a run
// (ErrRunExists) or files train did not write there (ErrRunDir).
func (r *run) checkEmpty() error {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return err
	}
	if len(ents) == 0 {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if _, err := os.Stat(filepath.Join(r.dir, RunFile)); err == nil {
		return fmt.Errorf("%w: %s", ErrRunExists, r.dir)
	}
	return fmt.Errorf("%w: %s holds %s but no %s, so train did not make a run there; a new run needs a missing or empty directory, and nothing in this one is changed (choose another --run-dir)",
		ErrRunDir, r.dir, quoteList(names, 6), RunFile)
}

func quoteList(names []string, n int) string {
	if len(names) > n {
		return fmt.Sprintf("%v and %d more", names[:n], len(names)-n)
	}
	return fmt.Sprint(names)
}

// openResources loads the model, the policy and its updater (restoring
// state), the rollout adapter and context, the embedder, the environments
// and the roller, and checks that the first prompt fits the context.
// Nothing is written to the run directory.
func (r *run) openResources(ctx context.Context, cfg *Config, state *optim.State, onEngine func(EnginePlan)) error {
	threads := cfg.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	gpuLayers := 0
	if cfg.Device == "gpu" || cfg.Device == "auto" {
		gpuLayers = -1
	}
	if cfg.Device == "gpu" && !gpuPresent() {
		return fmt.Errorf("%w: device gpu: no GPU device is loaded (ggml sees %s), so nothing would run on a GPU; load a GPU backend (make cuda, then --backend bin/libggml-cuda.so), or set device: auto (a GPU when there is one, else the CPU) or cpu",
			ErrRunConfig, deviceNames())
	}
	if gpuLayers != 0 && gpuPresent() {
		oldLogpOnGPU(cfg)
	}
	mem, _ := sysmem.Available() // unknown (zero) off Linux
	lm, err := llama.LoadModel(cfg.Model, llama.ModelParams{GPULayers: gpuLayers})
	if err != nil {
		return err
	}
	r.onClose(lm.Close)
	cfg.Context = cfg.EpisodeContext(lm.Info().NCtxTrain)
	// The training engine reads llama.cpp's loaded weights (one copy of the
	// base model in memory; only Wᵀ copies, LoRA state and buffers are
	// added), sized to the memory available (EnginePlan). A packed episode
	// (its last prompt and response) is up to cfg.Context tokens long: the
	// engine's compute cap must fit one.
	plan, err := planEngine(*cfg, lm, mem)
	if err != nil {
		return err
	}
	r.plan = plan
	if onEngine != nil {
		onEngine(plan)
	}
	eo := plan.Options(threads, cfg.Device)
	eo.ComputeRefTokens = cfg.Context
	policy, err := cgo.LoadShared(lm, cgo.LoRAConfig{Rank: cfg.LoRA.Rank, Alpha: cfg.LoRA.Alpha, Targets: cfg.LoRA.Targets, Seed: cfg.Seed}, eo)
	if err != nil {
		return err
	}
	r.onClose(policy.Close)
	ucfg, err := cfg.UpdaterConfig()
	if err != nil {
		return err
	}
	u, err := optim.NewUpdater(policy, ucfg)
	if err != nil {
		return err
	}
	if state != nil {
		if err := u.Restore(state); err != nil {
			return fmt.Errorf("%w: %s: %w (the checkpoint was made for another adapter shape: lora.rank, lora.alpha and lora.targets must stay the run's)",
				ErrRunState, filepath.Join(r.ckpt, optim.StateFile), err)
		}
	} else if cfg.LoRA.Init != "" {
		a, err := lora.Read(cfg.LoRA.Init)
		if err != nil {
			return fmt.Errorf("%w: lora.init: %w", ErrRunConfig, err)
		}
		if err := u.LoadAdapter(a); err != nil {
			return fmt.Errorf("%w: lora.init %s: %w", ErrRunConfig, cfg.LoRA.Init, err)
		}
	}
	ad, err := loadRolloutAdapter(lm, u)
	if err != nil {
		return err
	}
	r.onClose(ad.Close)
	nseq := cfg.Batch.Tasks * cfg.Batch.Rollouts
	lctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: cfg.Context, NSeqMax: nseq, Threads: threads})
	if err != nil {
		return err
	}
	r.onClose(lctx.Close)
	if err := lctx.SetAdapter(ad, 1); err != nil {
		return err
	}
	// The rollout side sees every update at once: the Updater overwrites
	// the loaded adapter's tensors in place (no reload).
	u.Sinks = []optim.TensorSink{ad}
	emb, closeEmb, err := rollout.OpenEmbedder(cfg.Memory, lm, threads)
	if err != nil {
		return fmt.Errorf("%w: memory.embedder: %w", ErrRunConfig, err)
	}
	r.onClose(closeEmb)
	pool, err := newEnvPool(cfg.Env, cfg.EnvOptions, nseq)
	if err != nil {
		return err
	}
	r.onClose(pool.Close)
	roller, err := rollout.NewRoller(lctx, cfg.Rollout, rollout.Options{Env: cfg.Env, EnvOptions: cfg.EnvOptions, Pool: pool,
		MemoryConfig: cfg.Memory, Seed: cfg.Seed, OracleTip: demos.TrajectoryTip})
	if err != nil {
		return err
	}
	tasks := roller.Tasks()
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Name < tasks[j].Name })
	trainPool, err := TrainPool(tasks, cfg.Tasks, environments.Train)
	if err != nil {
		return err
	}
	if err := checkFirstPrompts(ctx, roller, pool, trainPool, cfg, lctx.NCtxSeq()); err != nil {
		return err
	}
	r.cfg, r.roller, r.emb = *cfg, roller, emb
	r.loop = &Loop{Cfg: *cfg, Updater: u, Prober: policy, Engine: policy, Pool: trainPool}
	return nil
}

// loadRolloutAdapter loads u's adapter into llama.cpp for the rollouts,
// through a file in a temporary folder (removed at once: llama.cpp keeps
// the tensors in memory).
func loadRolloutAdapter(lm *llama.Model, u *optim.Updater) (*llama.Adapter, error) {
	a, err := u.Adapter()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "empo2-rollout-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, "adapter.gguf")
	if err := a.Write(p, gguf.TypeF32); err != nil {
		return nil, err
	}
	return lm.LoadAdapter(p)
}

// newEnvPool makes n instances of env (ScienceWorld: one JVM each): the
// first alone, so that a bad option (a missing jar) is one error, not one
// per instance, then the others in parallel. NewPoolFunc calls its
// constructor from n goroutines at once: the first instance goes to exactly
// one of them through a channel (a plain "handed" flag, read and set
// unsynchronized, once let two calls both take it, so that two episodes
// of a batch shared one instance and the second to step after its end
// failed with environments.ErrEpisodeDone).
func newEnvPool(env string, o environments.Options, n int) (*environments.Pool, error) {
	spec, err := environments.Lookup(env)
	if err != nil {
		return nil, fmt.Errorf("%w: env: %w", ErrRunConfig, err)
	}
	first, err := spec.New(o)
	if err != nil {
		return nil, fmt.Errorf("%w: env %s: %w", ErrRunConfig, env, err)
	}
	firsts := make(chan environments.Env, 1)
	firsts <- first
	pool, err := environments.NewPoolFunc(func() (environments.Env, error) {
		select {
		case e := <-firsts:
			return e, nil
		default:
			return spec.New(o)
		}
	}, n)
	if err != nil {
		select {
		case e := <-firsts: // never handed to the pool: not closed by it
			e.Close()
		default:
		}
	}
	return pool, err
}

// checkFirstPrompts refuses a context that cannot hold the first prompt
// of a task (one variation per task of the train pool) and its first
// action: every episode of the task would end before acting. The error
// lists every such task.
func checkFirstPrompts(ctx context.Context, roller *rollout.Roller, pool *environments.Pool, train []TaskVar, cfg *Config, nctx int) error {
	seen := map[string]bool{}
	pc := roller.Renderer().Config()
	var long []string
	for _, tv := range train {
		if seen[tv.Task] {
			continue
		}
		seen[tv.Task] = true
		var n int
		err := pool.With(ctx, func(e environments.Env) error {
			res, err := e.Reset(ctx, tv.Task, tv.Variation, cfg.Seed)
			if err != nil {
				return err
			}
			ct, err := roller.Renderer().Tokens(rollout.Messages(pc, res.TaskDescription, res.Observation, nil, ""), true)
			n = len(ct.Tokens)
			return err
		})
		if err != nil {
			return fmt.Errorf("%w: first prompt of %s/%d: %w", ErrTrain, tv.Task, tv.Variation, err)
		}
		if n+pc.MaxActionTokens > nctx {
			long = append(long, fmt.Sprintf("%s/%d (%d tokens)", tv.Task, tv.Variation, n))
		}
	}
	if len(long) == 0 {
		return nil
	}
	held := ""
	if nctx != cfg.Context {
		held = fmt.Sprintf(" (llama.cpp holds %d per episode)", nctx)
	}
	return fmt.Errorf("%w: context %d%s cannot hold the first prompt and an action (rollout.max_action_tokens %d) of %d of %d tasks: %s; every episode of them would end before acting: raise context (up to the model's training context: a model made with a larger --ctx), shorten rollout.system, or leave them out of tasks",
		ErrRunConfig, cfg.Context, held, pc.MaxActionTokens, len(long), len(seen), strings.Join(long, ", "))
}

// run runs the steps from r.start+1 to the configured last; see Train.
func (r *run) run(ctx context.Context, opts RunOptions) (RunResult, error) {
	cfg := &r.cfg
	res := RunResult{FirstStep: r.start + 1, LastStep: r.start, Checkpoint: r.ckpt}
	if opts.OnStart != nil {
		opts.OnStart(r.start+1, cfg.Steps)
	}
	lastCkpt := r.start
	checkpoint := func(step int) error {
		watch.From(ctx).Phase(watch.Checkpoint, 0)
		p, err := optim.WriteCheckpoint(r.dir, step, cfg.Seed, r.loop.Updater, cfg.Checkpoint.Keep)
		if err != nil {
			return err
		}
		res.Checkpoint, lastCkpt = p, step
		return nil
	}
	for step := r.start + 1; step <= cfg.Steps && ctx.Err() == nil; step++ {
		m, err := r.loop.Step(ctx, step)
		if err != nil {
			if ctx.Err() != nil { // interrupted: abandon the step
				break
			}
			return res, err
		}
		if err := appendJSONL(r.mf, m); err != nil {
			return res, err
		}
		if err := r.tensorboard(m, (*tfevents.RunLog).Metrics); err != nil {
			return res, err
		}
		res.LastStep = step
		res.add(m, cfg.Batch.Tasks)
		if opts.OnStep != nil {
			opts.OnStep(m)
		}
		if cfg.Eval.Every > 0 && step%cfg.Eval.Every == 0 {
			line, err := periodicEval(ctx, r.roller, cfg, step)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				return res, err
			}
			if err := appendEvalLine(filepath.Join(r.dir, EvalFile), line); err != nil {
				return res, err
			}
			if err := r.tensorboard(line, (*tfevents.RunLog).Eval); err != nil {
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
	res.Interrupted = ctx.Err() != nil
	// Interrupted (or checkpoint.every skipped the last steps): checkpoint
	// the last completed step, and drop the traces of an abandoned one.
	if res.LastStep > lastCkpt {
		if err := checkpoint(res.LastStep); err != nil {
			return res, err
		}
	}
	if _, err := r.store.DeleteAfterStep(context.WithoutCancel(ctx), int64(lastCkpt)); err != nil {
		return res, err
	}
	return res, nil
}

// tensorboard writes the scalars of a metrics or eval line (v, as its
// JSONL file holds it) to the event file, when there is one.
func (r *run) tensorboard(v any, write func(*tfevents.RunLog, []byte) error) error {
	if r.tb == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return write(r.tb, b)
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

// oldLogpOnGPU: rollouts run on a GPU, where llama.cpp's CUDA log-probs
// differ from the CPU's and the training engine's by up to ≈1e-2 (F32 models,
// TF32 off; docs/gpu.md, cause not yet isolated: the GPU check's rollout
// phases test the F32 KV cache and flash attention). π_old is then the
// engine's recompute: update.old_logp rollout becomes recompute (the saved
// config says so), and the log says it either way.
func oldLogpOnGPU(cfg *Config) {
	if cfg.Update.OldLogp == OldLogpRollout {
		cfg.Update.OldLogp = OldLogpRecompute
		log.Warn().Str("update.old_logp", string(OldLogpRecompute)).
			Msg("rollouts run on a GPU, whose llama.cpp log-probs differ from the training engine's by up to 1e-2 (docs/gpu.md): π_old is recomputed by the engine instead of taken from the rollout")
		return
	}
	log.Info().Str("update.old_logp", string(cfg.Update.OldLogp)).
		Msg("rollouts run on a GPU: π_old is recomputed by the training engine (the GPU rollouts' log-probs are not used)")
}

// gpuPresent reports whether ggml has a GPU device (a loaded backend's).
func gpuPresent() bool {
	for _, d := range llama.Devices() {
		if d.Kind == "gpu" || d.Kind == "igpu" {
			return true
		}
	}
	return false
}

// deviceNames lists ggml's devices for an error message.
func deviceNames() string {
	var names []string
	for _, d := range llama.Devices() {
		names = append(names, d.Name+" ("+d.Kind+")")
	}
	if len(names) == 0 {
		return "no device"
	}
	return strings.Join(names, ", ")
}
