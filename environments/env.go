package environments

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Sentinel errors callers can act on (wrap with %w).
var (
	ErrUnknownEnv    = errors.New("environments: unknown environment")
	ErrUnknownTask   = errors.New("environments: unknown task")
	ErrBadVariation  = errors.New("environments: variation out of range")
	ErrNotReset      = errors.New("environments: Step before Reset")
	ErrEpisodeDone   = errors.New("environments: episode is over")
	ErrNotSupported  = errors.New("environments: not supported by this environment")
	ErrClosed        = errors.New("environments: environment is closed")
	ErrSimulatorDied = errors.New("environments: simulator process died")
)

// Info carries environment-specific extras (e.g. "moves", "valid", "won").
type Info map[string]any

// InfoTruncated is the StepResult.Info key (value true) of a step whose
// episode ended only because it reached its step limit, not because the
// task was completed or failed.
const InfoTruncated = "truncated"

// ResetResult is what an episode starts with.
type ResetResult struct {
	Observation     string // first observation (ScienceWorld: the "look around" text)
	TaskDescription string // the goal in words, as the agent sees it
	Info            Info
}

// StepResult is the outcome of one action.
type StepResult struct {
	Observation string
	Reward      float64 // score change caused by this action, in Score units
	Done        bool
	Info        Info
}

// Env is one running instance of an environment. It is not safe for
// concurrent use: use a Pool for parallel rollouts.
type Env interface {
	// Reset starts an episode of task at variation; seed drives any randomness.
	Reset(ctx context.Context, task string, variation int, seed int64) (ResetResult, error)
	// Step applies one action (free text, e.g. "open door to kitchen").
	Step(ctx context.Context, action string) (StepResult, error)
	// ValidActions lists the actions the environment accepts now, or
	// ErrNotSupported where it cannot know them.
	ValidActions(ctx context.Context) ([]string, error)
	// Score is the episode's current score on a 0–100 scale (negative for a
	// failed ScienceWorld-style episode).
	Score() float64
	// Close releases the instance; it is idempotent.
	Close() error
}

// GoldProvider is implemented by environments that know a gold action
// sequence for a task variation.
type GoldProvider interface {
	GoldActions(ctx context.Context, task string, variation int) ([]string, error)
}

// Split names a variation split.
type Split string

const (
	Train Split = "train"
	Dev   Split = "dev"
	Test  Split = "test"
)

// Valid reports whether s is one of the three splits, spelled exactly
// (ParseSplit also accepts other cases and surrounding spaces).
func (s Split) Valid() bool { return s == Train || s == Dev || s == Test }

// Task describes one task of an environment.
type Task struct {
	Name                 string
	Description          string // one line, for `empo2 env list`
	Variations           int    // number of variations (0..Variations-1)
	Train, Dev, TestVars []int
	StepLimit            int  // per-task step limit
	HeldOut              bool // reserved for out-of-distribution evaluation
}

// Options configures an environment instance. Fields an environment does
// not use are ignored. It is also the env_options section of a training
// run's configuration (the yaml and doc tags: key and documentation).
type Options struct {
	DataDir         string            `yaml:"data_dir" doc:"data directory (webshop)"`
	Jar             string            `yaml:"jar" doc:"simulator jar (scienceworld; one JVM per parallel episode, pooled)"`
	Simplifications string            `yaml:"simplifications" doc:"scienceworld simplification preset, e.g. easy (the EMPO² recipe)"`
	StepLimit       int               `yaml:"step_limit" doc:"environment step limit; 0 = each task's own limit"`
	Extra           map[string]string `yaml:"extra" doc:"environment-specific settings (map of strings)"`
}

// Spec registers an environment by name.
type Spec struct {
	Name        string
	Description string
	New         func(Options) (Env, error)
	Tasks       func(Options) ([]Task, error)
	// TipChecker, when set, checks tips written after its episodes (tips.go).
	TipChecker TipChecker
	// Defaults are the environment's own run settings (the recipe it is
	// trained with); a run configuration overrides each of them.
	Defaults Defaults
	// InstanceMemory, when set, bounds the memory one instance may take
	// (bytes; 0 = unknown) and says what bounds it (e.g. "JVM heap cap
	// -Xmx512m"); NewPool logs the pool's total against the machine's.
	InstanceMemory func(Options) (bytes int64, what string)
}

// Defaults are what an environment asks of a run unless the run says
// otherwise: the one place where a per-environment default lives.
type Defaults struct {
	// CorrectActions: replace an action outside the valid set by the most
	// similar valid one (CorrectAction) before it is played; the EMPO²
	// recipe does so on ScienceWorld, where an invalid action costs no
	// simulator move, so that a weak policy's episode would otherwise
	// run, unchanged, until its context is full.
	CorrectActions bool
	// SuccessScore: an episode succeeds when its final score reaches it
	// (0 = FullScore).
	SuccessScore float64
}

// FullScore is the score of a completed task on every environment's 0–100
// scale.
const FullScore = 100

// Success is the score at which an episode succeeds: SuccessScore, or
// FullScore when none is set.
func (d Defaults) Success() float64 {
	if d.SuccessScore > 0 {
		return d.SuccessScore
	}
	return FullScore
}

var (
	regMu    sync.RWMutex
	registry = map[string]Spec{}
)

// Register adds an environment; it panics on a duplicate name (a programmer mistake).
func Register(s Spec) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[s.Name]; dup {
		panic("environments: duplicate registration of " + s.Name)
	}
	registry[s.Name] = s
}

// Lookup returns the Spec registered under name.
func Lookup(name string) (Spec, error) {
	regMu.RLock()
	defer regMu.RUnlock()
	s, ok := registry[name]
	if !ok {
		return Spec{}, fmt.Errorf("%w: %q (have %v)", ErrUnknownEnv, name, namesLocked())
	}
	return s, nil
}

// Names lists the registered environments, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	return namesLocked()
}

func namesLocked() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
