package scienceworld

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/empo2/empo2/environments"
)

// Name is the registry name of this environment.
const Name = "scienceworld"

const pythonInterface = "scienceworld.runtime.pythonapi.PythonInterface"

// Options.Extra keys understood by this environment.
const (
	ExtraJava           = "java"            // java launcher (default $JAVA_HOME/bin/java, then PATH)
	ExtraHeap           = "xmx"             // JVM heap cap, e.g. "1g" (default DefaultHeap)
	ExtraJVMFlags       = "jvm_flags"       // JVM flags besides -Xmx, space-separated (default DefaultJVMFlags; present but empty: none)
	ExtraTimeout        = "timeout"         // per py4j call, e.g. "30s" (default 120s)
	ExtraStartupTimeout = "startup_timeout" // JVM start (default 120s)
	ExtraInfo           = "info"            // "full": add look, inv, taskDesc and valid to StepResult.Info, as the Python wrapper does
	ExtraClasspath      = "classpath"       // more class path entries after the jar (e.g. a py4j jar, for a simulator jar without py4j)
)

// The JVM's memory. Each instance is its own JVM, and a run starts one per
// parallel episode (batch.tasks × batch.rollouts), so its footprint is
// multiplied by the pool size. Left to itself a JVM sizes its heap from the
// machine: an initial heap of 1/64 of the memory (384 MiB on 24 GiB) and
// G1 on two or more cores, whose young generation fills most of that
// initial heap with the simulator's per-step garbage before it collects;
// that matches the 290–370 MB RSS per JVM seen within a few steps with
// -Xmx1g. DefaultJVMFlags start the heap small and let the serial collector
// grow it only when live data need it (the simulator is single-threaded:
// one request at a time), compile with C1 alone (less compiler memory and a
// faster warm-up; simulator steps are not the bottleneck beside the
// policy's decoding) and keep no hsperfdata file in /tmp. DefaultHeap caps
// the heap; Spec.InstanceMemory reports that cap, so that NewPool logs
// N JVMs × heap cap against the machine's memory. The JVM's own memory
// (metaspace, code cache, thread stacks) comes on top and is not capped.
const (
	DefaultHeap     = "512m"
	DefaultJVMFlags = "-Xms32m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData"
)

// SuccessScore is the EMPO² recipe's success rule on ScienceWorld, an
// episode that ends with a score above 70; scores are whole numbers, so
// "above 70" is "at least 71".
const SuccessScore = 71

func init() {
	environments.Register(environments.Spec{
		Name:        Name,
		Description: "ScienceWorld 1.3 simulator (Scala jar, one JVM per instance, py4j from Go)",
		New: func(o environments.Options) (environments.Env, error) {
			e, err := New(o)
			if err != nil {
				return nil, err // not a typed nil *Env inside the interface
			}
			return e, nil
		},
		Tasks: Tasks,
		// The EMPO² recipe: invalid actions corrected to the most similar
		// valid one, success above 70.
		Defaults: environments.Defaults{CorrectActions: true, SuccessScore: SuccessScore},
		InstanceMemory: func(o environments.Options) (int64, string) {
			heap := heapOption(o)
			n, err := ParseJavaSize(heap)
			if err != nil {
				return 0, ""
			}
			return n, "JVM heap cap -Xmx" + heap + ", plus the JVM's own memory"
		},
	})
}

// heapOption is the -Xmx value of opts.
func heapOption(opts environments.Options) string {
	if h := opts.Extra[ExtraHeap]; h != "" {
		return h
	}
	return DefaultHeap
}

// jvmArgs are the JVM options of an instance: -Xmx and the other flags.
func jvmArgs(opts environments.Options) ([]string, error) {
	heap := heapOption(opts)
	if _, err := ParseJavaSize(heap); err != nil {
		return nil, fmt.Errorf("scienceworld: option %s=%q: %w", ExtraHeap, heap, err)
	}
	flags, ok := opts.Extra[ExtraJVMFlags]
	if !ok {
		flags = DefaultJVMFlags
	}
	return append([]string{"-Xmx" + heap}, strings.Fields(flags)...), nil
}

// ParseJavaSize reads a JVM memory size as -Xmx takes it: a whole number
// of bytes, or of KiB, MiB, GiB or TiB with the suffix k, m, g or t (either
// case).
func ParseJavaSize(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > math.MaxInt64/mult {
		return 0, fmt.Errorf("want a JVM memory size like 512m or 1g")
	}
	return v * mult, nil
}

// Env is one ScienceWorld instance: its own JVM (the simulator keeps global
// state) and one py4j connection. It reproduces the official Python
// wrapper: Reset loads the task and plays "look around"; the score is
// round(100 × getScore()) (round half to even, like Python's round); the
// reward is the score change; an episode is done when the simulator says
// completed, the score is negative, or the move count exceeds the step limit.
type Env struct {
	opts     environments.Options
	correct  bool
	fullInfo bool

	proc *jvm // nil when connected to an external gateway (tests)
	cl   *client
	pi   Ref

	agentIdx bool // the jar's methods take an agent index (multi-agent builds)
	task     taskInfo
	variant  int
	limit    int
	last     int
	score    int
	started  bool
	done     bool
	closed   bool
}

var (
	_ environments.Env          = (*Env)(nil)
	_ environments.GoldProvider = (*Env)(nil)
)

func durationExtra(opts environments.Options, key string, def time.Duration) (time.Duration, error) {
	s := opts.Extra[key]
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("scienceworld: option %s=%q: want a positive duration like 30s", key, s)
	}
	return d, nil
}

// New starts a JVM running the simulator jar and creates its
// PythonInterface. Close it to stop the JVM.
func New(opts environments.Options) (*Env, error) {
	if err := checkSimplifications(opts.Simplifications, ""); err != nil {
		return nil, err
	}
	jar, err := findJar(opts)
	if err != nil {
		return nil, err
	}
	java, err := findJava(opts)
	if err != nil {
		return nil, err
	}
	startup, err := durationExtra(opts, ExtraStartupTimeout, 120*time.Second)
	if err != nil {
		return nil, err
	}
	jargs, err := jvmArgs(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startup)
	defer cancel()
	cp := jar
	if extra := opts.Extra[ExtraClasspath]; extra != "" {
		cp += string(os.PathListSeparator) + extra
	}
	proc, err := startJVM(ctx, java, cp, filepath.Dir(jar), jargs, startup)
	if err != nil {
		return nil, err
	}
	conn, err := proc.dial(10 * time.Second)
	if err != nil {
		proc.kill()
		return nil, fmt.Errorf("%w: connecting to the gateway: %v", environments.ErrSimulatorDied, err)
	}
	e, err := newWithConn(ctx, opts, conn, proc)
	if err != nil {
		_ = proc.stop(2 * time.Second)
		return nil, err
	}
	return e, nil
}

// newWithConn builds an Env on an open gateway connection.
func newWithConn(ctx context.Context, opts environments.Options, conn net.Conn, proc *jvm) (*Env, error) {
	timeout, err := durationExtra(opts, ExtraTimeout, 120*time.Second)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	cl := newClient(conn, timeout)
	if proc != nil {
		cl.dead = proc.deadErr
		// A hung or half-dead JVM is of no further use: stop it now rather
		// than at Close.
		cl.onFail = func() { go proc.kill() }
	}
	pi, err := cl.New(ctx, pythonInterface)
	if err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("scienceworld: creating %s (is the jar a ScienceWorld jar?): %w", pythonInterface, err)
	}
	return &Env{
		opts: opts, proc: proc, cl: cl, pi: pi,
		correct:  environments.CorrectionEnabled(opts),
		fullInfo: strings.EqualFold(opts.Extra[ExtraInfo], "full"),
	}, nil
}

func checkSimplifications(s, task string) error {
	if s == "" {
		return nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		ok := f == "easy"
		for _, k := range Simplifications {
			ok = ok || f == k
		}
		if !ok {
			return fmt.Errorf("%w: ScienceWorld simplification %q (have easy, %s)", environments.ErrNotSupported, f, strings.Join(Simplifications, ", "))
		}
	}
	electrical := strings.Contains(task, "power-component") || strings.Contains(task, "conductivity")
	if electrical && strings.Contains(s, "noElectricalAction") {
		return fmt.Errorf("%w: task %s needs electrical actions, but noElectricalAction was asked for", environments.ErrNotSupported, task)
	}
	return nil
}

// isMissingMethod reports a py4j "method does not exist" answer.
func isMissingMethod(err error) bool {
	var je *JavaError
	return errors.As(err, &je) && strings.Contains(je.Msg, "does not exist")
}

// agentMethods take a trailing agent index in multi-agent builds of the jar.
var agentMethods = map[string]bool{
	"step": true, "freeActionLook": true, "freeActionInventory": true,
	"getValidActionObjectCombinations": true, "getPossibleObjects": true,
}

// call invokes a PythonInterface method, adapting once to jars whose
// methods take an agent index.
func (e *Env) call(ctx context.Context, method string, args ...any) (Value, error) {
	if e.agentIdx && agentMethods[method] {
		args = append(args, 0)
	}
	v, err := e.cl.Call(ctx, e.pi, method, args...)
	if err != nil && !e.agentIdx && agentMethods[method] && isMissingMethod(err) {
		if v2, err2 := e.cl.Call(ctx, e.pi, method, append(args, 0)...); err2 == nil {
			e.agentIdx = true
			return v2, nil
		}
	}
	return v, err
}

func (e *Env) load(ctx context.Context, task string, variation int, simp string, gold bool) error {
	v, err := e.cl.Call(ctx, e.pi, "load", task, variation, simp, gold)
	if isMissingMethod(err) { // multi-agent builds: load(task, variation, simplifications, numAgents, gold)
		v, err = e.cl.Call(ctx, e.pi, "load", task, variation, simp, 1, gold)
	}
	if err != nil {
		return err
	}
	if v.Type == 's' && v.Str != "" {
		return fmt.Errorf("scienceworld: load %s variation %d: %s", task, variation, v.Str)
	}
	return nil
}

func (e *Env) usable() error {
	if e.closed {
		return environments.ErrClosed
	}
	return nil
}

// taskVariation looks task up and checks that it has variation.
func taskVariation(task string, variation int) (taskInfo, error) {
	t, ok := lookupTask(task)
	if !ok {
		return t, fmt.Errorf("%w: ScienceWorld has no task %q", environments.ErrUnknownTask, task)
	}
	if variation < 0 || variation >= t.variations {
		return t, fmt.Errorf("%w: %s has variations 0..%d, got %d", environments.ErrBadVariation, t.name, t.variations-1, variation)
	}
	return t, nil
}

// Reset loads task at variation (the seed is not used: the simulator
// seeds itself from the variation) and plays "look around", as the Python
// wrapper's load + reset do.
func (e *Env) Reset(ctx context.Context, task string, variation int, seed int64) (environments.ResetResult, error) {
	if err := e.usable(); err != nil {
		return environments.ResetResult{}, err
	}
	t, err := taskVariation(task, variation)
	if err != nil {
		return environments.ResetResult{}, err
	}
	if err := checkSimplifications(e.opts.Simplifications, t.name); err != nil {
		return environments.ResetResult{}, err
	}
	e.started, e.done = false, false
	// Always load (never the simulator's reset()): PythonInterface.reset()
	// is load() with the same arguments, but it also regenerates the gold
	// path on every reset once one was asked for (the flag is sticky in the
	// JVM), which would make every later episode pay for a gold-agent run.
	if err := e.load(ctx, t.name, variation, e.opts.Simplifications, false); err != nil {
		return environments.ResetResult{}, err
	}
	e.task, e.variant = t, variation
	e.limit = environments.StepLimit(environments.Task{StepLimit: t.limit}, e.opts)
	e.last, e.score = 0, 0
	obs, score, _, moves, err := e.rawStep(ctx, "look around")
	if err != nil {
		return environments.ResetResult{}, err
	}
	e.last, e.score = score, score
	desc, err := e.cl.Call(ctx, e.pi, "getTaskDescription")
	if err != nil {
		return environments.ResetResult{}, err
	}
	e.started = true
	return environments.ResetResult{
		Observation:     obs,
		TaskDescription: desc.Str,
		Info:            environments.Info{"moves": moves, "score": score, "task": t.name, "variation": variation},
	}, nil
}

// Score converts the simulator's 0–1 score the way the Python wrapper does:
// int(round(100 × raw)), rounding halves to even.
func Score(raw float64) int { return int(math.RoundToEven(100 * raw)) }

func (e *Env) rawStep(ctx context.Context, action string) (obs string, score int, completed bool, moves int, err error) {
	o, err := e.call(ctx, "step", action)
	if err != nil {
		return
	}
	s, err := e.cl.Call(ctx, e.pi, "getScore")
	if err != nil {
		return
	}
	c, err := e.cl.Call(ctx, e.pi, "getCompleted")
	if err != nil {
		return
	}
	m, err := e.cl.Call(ctx, e.pi, "getNumMoves")
	if err != nil {
		return
	}
	return o.Str, Score(s.Num), c.Bool, int(m.Int), nil
}

// Step plays one action (corrected to the most similar valid action first
// when the correct_actions extra is on).
func (e *Env) Step(ctx context.Context, action string) (environments.StepResult, error) {
	if err := e.usable(); err != nil {
		return environments.StepResult{}, err
	}
	if !e.started {
		return environments.StepResult{}, environments.ErrNotReset
	}
	if e.done {
		return environments.StepResult{}, environments.ErrEpisodeDone
	}
	info := environments.Info{}
	if e.correct {
		valid, err := e.ValidActions(ctx)
		if err != nil {
			return environments.StepResult{}, err
		}
		if fixed, changed := environments.CorrectAction(action, valid); changed {
			info["corrected_from"] = action
			action = fixed
		}
	}
	obs, score, completed, moves, err := e.rawStep(ctx, action)
	if err != nil {
		return environments.StepResult{}, err
	}
	reward := score - e.last
	e.last, e.score = score, score
	e.done = completed || score < 0 || moves > e.limit
	if e.done && !completed && score >= 0 {
		info[environments.InfoTruncated] = true
	}
	info["moves"] = moves
	info["score"] = score
	info["completed"] = completed
	if e.fullInfo {
		for _, kv := range [][2]string{{"look", "freeActionLook"}, {"inv", "freeActionInventory"}, {"taskDesc", "freeActionTaskDesc"}} {
			call := e.call
			if kv[0] == "taskDesc" { // takes no agent index in any build
				call = func(ctx context.Context, m string, args ...any) (Value, error) {
					return e.cl.Call(ctx, e.pi, m, args...)
				}
			}
			v, err := call(ctx, kv[1])
			if err != nil {
				return environments.StepResult{}, err
			}
			info[kv[0]] = v.Str
		}
		valid, err := e.ValidActions(ctx)
		if err != nil {
			return environments.StepResult{}, err
		}
		info["valid"] = valid
	}
	return environments.StepResult{Observation: obs, Reward: float64(reward), Done: e.done, Info: info}, nil
}

// ValidActions returns the simulator's valid action-object combinations.
func (e *Env) ValidActions(ctx context.Context) ([]string, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if !e.started {
		return nil, environments.ErrNotReset
	}
	v, err := e.call(ctx, "getValidActionObjectCombinations")
	if err != nil {
		return nil, err
	}
	if !v.IsRef() {
		return nil, fmt.Errorf("%w: getValidActionObjectCombinations answered type %q", errProtocol, v.Type)
	}
	return e.cl.StringsJoined(ctx, v.Ref)
}

// Score is the current score (round(100 × raw), negative after a failure).
func (e *Env) Score() float64 { return float64(e.score) }

// GoldActions asks the simulator for its gold action sequence (this loads
// the task with gold-path generation and ends any episode in progress; the
// next Reset loads the task plainly).
func (e *Env) GoldActions(ctx context.Context, task string, variation int) ([]string, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	t, err := taskVariation(task, variation)
	if err != nil {
		return nil, err
	}
	e.started = false
	if err := e.load(ctx, t.name, variation, e.opts.Simplifications, true); err != nil {
		return nil, err
	}
	v, err := e.cl.Call(ctx, e.pi, "getGoldActionSequence")
	if err != nil {
		return nil, err
	}
	if !v.IsRef() {
		return nil, fmt.Errorf("%w: getGoldActionSequence answered type %q", errProtocol, v.Type)
	}
	return e.cl.StringsJoined(ctx, v.Ref)
}

// Client-side queries of the simulator, for checks and tools.

// TaskNames asks the simulator for its task list.
func (e *Env) TaskNames(ctx context.Context) ([]string, error) {
	v, err := e.cl.Call(ctx, e.pi, "getTaskNames")
	if err != nil {
		return nil, err
	}
	if !v.IsRef() {
		return nil, fmt.Errorf("%w: getTaskNames answered type %q", errProtocol, v.Type)
	}
	return e.cl.StringsJoined(ctx, v.Ref)
}

// MaxVariations asks the simulator for a task's variation count.
func (e *Env) MaxVariations(ctx context.Context, task string) (int, error) {
	v, err := e.cl.Call(ctx, e.pi, "getTaskMaxVariations", task)
	return int(v.Int), err
}

// Split asks the simulator for the variations of the loaded task in split s.
func (e *Env) Split(ctx context.Context, s environments.Split) ([]int, error) {
	m := map[environments.Split]string{environments.Train: "getVariationsTrain", environments.Dev: "getVariationsDev", environments.Test: "getVariationsTest"}[s]
	if m == "" {
		return nil, fmt.Errorf("%w: split %q", environments.ErrBadVariation, s)
	}
	v, err := e.cl.Call(ctx, e.pi, m)
	if err != nil {
		return nil, err
	}
	if !v.IsRef() {
		return nil, fmt.Errorf("%w: %s answered type %q", errProtocol, m, v.Type)
	}
	return e.cl.Ints(ctx, v.Ref)
}

// PossibleSimplifications asks the simulator for its simplification labels.
func (e *Env) PossibleSimplifications(ctx context.Context) ([]string, error) {
	v, err := e.cl.Call(ctx, e.pi, "getPossibleSimplifications")
	if err != nil {
		return nil, err
	}
	return strings.Split(v.Str, ", "), nil
}

// Close stops the JVM (closing its stdin makes the gateway exit; it is
// killed if it lingers). It is idempotent.
func (e *Env) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	_ = e.cl.Close()
	if e.proc != nil {
		return e.proc.stop(5 * time.Second)
	}
	return nil
}
