// Package runfiles is the contract between the programs that write a run
// directory (`empo2 train`, `empo2 eval`) and the one that reads it
// (`empo2 report`): the names of the run directory's files, the run
// marker (run.json), and the records of metrics.jsonl, eval.jsonl and the
// eval reports, as Go types whose JSON encoding is the file format.
//
// A run directory:
//
//	run.json        the marker: this directory is a run train made (Run)
//	config.yaml     the resolved configuration (commented YAML, trainer.Config)
//	memory.db       the tips memory (memstore, SQLite)
//	metrics.jsonl   one Metrics per training step
//	eval.jsonl      one EvalLine per periodic evaluation
//	eval/*.json     EvalReport or OODReport objects (`empo2 eval --json`)
//	checkpoints/    step-NNNNNN/{adapter.gguf, state.gguf, checkpoint.json}, latest
//
// Conventions:
//
//   - Pure Go (no cgo): report imports it and stays free of the model.
//   - A record gains fields freely (readers ignore the ones they do not
//     know); renaming or removing a field is a format change: report's
//     tests round-trip every record through report's reader, so a curve
//     that would silently vanish fails a test instead.
//   - Names are the JSON names of the fields; Go field names follow them.
package runfiles

// Files and folders of a run directory.
const (
	RunFile        = "run.json"      // the marker (Run)
	ConfigFile     = "config.yaml"   // the resolved configuration
	MemoryFile     = "memory.db"     // the tips memory
	MetricsFile    = "metrics.jsonl" // one Metrics per step
	EvalFile       = "eval.jsonl"    // one EvalLine per periodic evaluation
	EvalDir        = "eval"          // eval reports (EvalReport, OODReport as JSON)
	CheckpointsDir = "checkpoints"   // step-NNNNNN/ folders and `latest`
)

// Metrics is one line of metrics.jsonl: one training step. Means are over
// the step's episodes unless said otherwise; times are seconds.
type Metrics struct {
	Step              int            `json:"step"`
	Mode              string         `json:"mode"`            // the step's EMPO² mode; "mixed" when drawn per rollout
	Modes             map[string]int `json:"modes,omitempty"` // episodes per mode (mode drawn per rollout)
	Time              string         `json:"time"`            // RFC 3339, UTC, at the step's end
	Seed              int64          `json:"seed"`
	Episodes          int            `json:"episodes"`
	ScoreMean         float64        `json:"score_mean"`
	SuccessRate       float64        `json:"success_rate"`
	RewardMean        float64        `json:"reward_mean"`
	IntrinsicMean     float64        `json:"intrinsic_mean"`
	TipsRetrievedMean float64        `json:"tips_retrieved_mean"` // per action
	TipsWritten       int            `json:"tips_written"`
	Loss              float64        `json:"loss"`      // mean over updates
	ClipFrac          float64        `json:"clip_frac"` // token-weighted over updates
	ApproxKL          float64        `json:"approx_kl"` // token-weighted over updates
	Entropy           float64        `json:"entropy"`   // token-weighted over updates
	GradNorm          float64        `json:"grad_norm"` // mean over updates
	LR                float64        `json:"lr"`        // of the last update
	Updates           int            `json:"updates"`   // optimizer steps taken
	MaskedSeqs        int            `json:"masked_seqs"`
	SampleSteps       int            `json:"sample_steps"`
	ZeroVarGroups     int            `json:"zero_var_groups"` // groups whose episodes all scored alike (no advantage)
	Sequences         int            `json:"sequences"`
	TrainedTokens     int            `json:"trained_tokens"`
	SampleTokens      int            `json:"sample_tokens"`
	UnpackedTokens    int            `json:"unpacked_tokens"`
	GenTokens         int            `json:"gen_tokens"`
	EnvSteps          int            `json:"env_steps"`
	PromptSeen        int            `json:"prompt_tokens_seen"`
	PromptDecoded     int            `json:"prompt_tokens_decoded"`
	PromptUnique      int            `json:"prompt_tokens_unique"` // distinct prompt tokens of the trajectories (full history: the last prompt plus earlier tip blocks)
	RolloutTokPerS    float64        `json:"rollout_tokens_per_s"`
	EnvStepsPerS      float64        `json:"env_steps_per_s"`
	TRollout          float64        `json:"t_rollout"`
	TEmbedRetrieve    float64        `json:"t_embed_retrieve"`
	TTips             float64        `json:"t_tips"`
	TOldLogp          float64        `json:"t_old_logp"`
	TUpdate           float64        `json:"t_update"`
	TStep             float64        `json:"t_step"`

	// Memory: the largest compute buffer one graph of the step's update
	// needed (π_old recompute and PPO updates; bytes) and the process's
	// peak resident set so far (getrusage ru_maxrss; bytes; 0 where the
	// system does not report it).
	UpdateComputeBytes int64 `json:"update_compute_bytes"`
	MaxRSSBytes        int64 `json:"max_rss_bytes"`

	// LossScaleSkips: graphs of the step's updates whose loss-scaled
	// backward overflowed and was recomputed at a lower scale (F16, BF16
	// and quantized bases; docs/training.md, "Numerics")
	LossScaleSkips int `json:"loss_scale_skips"`

	// the step's tips checked against their episodes by the environment's
	// TipChecker (environments.TipChecker); absent without tips or checker
	TipsTrueFrac       *float64 `json:"tips_true_frac,omitempty"`
	TipsWellFormedFrac *float64 `json:"tips_wellformed_frac,omitempty"`

	// Why the step's episodes ended (done, step-limit, context, error) and
	// the per-episode context they had, in tokens.
	EndReasons EndCounts `json:"end_reasons,omitempty"`
	Context    int       `json:"context,omitempty"`
}

// EndCounts counts episodes by why they ended: done (the environment
// ended it), step-limit, context (the context was full), error (the
// environment failed).
type EndCounts map[string]int

// Total is the number of episodes counted.
func (c EndCounts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// TaskResult is one task's (or the overall) result of an evaluation.
type TaskResult struct {
	ScoreMean   float64 `json:"score_mean"`
	SuccessRate float64 `json:"success_rate"`
	Episodes    int     `json:"episodes"`
	StepsMean   float64 `json:"steps_mean"`
}

// EvalResult is one memory setting's evaluation: overall and per task.
type EvalResult struct {
	TaskResult
	Tasks map[string]TaskResult `json:"tasks"`
	// TipsRetrievedMean: tips counted above threshold per step (memory on).
	TipsRetrievedMean float64 `json:"tips_retrieved_mean"`
	// EndReasons: episodes per end reason.
	EndReasons EndCounts `json:"end_reasons,omitempty"`
}

// EvalLine is one line of eval.jsonl: the periodic evaluation after step
// Step, with memory off and on (absent when the run's eval.memory
// excludes it).
type EvalLine struct {
	Step      int         `json:"step"`
	Time      string      `json:"time"`
	MemoryOff *EvalResult `json:"memory_off,omitempty"`
	MemoryOn  *EvalResult `json:"memory_on,omitempty"`
}

// EvalReport is `empo2 eval --json`'s object (eval/NAME.json).
type EvalReport struct {
	MemoryOff   *EvalResult `json:"memory_off,omitempty"`
	MemoryOn    *EvalResult `json:"memory_on,omitempty"`
	Split       string      `json:"split"`
	Temperature float64     `json:"temperature"`
	Seed        int64       `json:"seed"`
}

// OODSeries is one arm of an out-of-distribution adaptation result: the
// per-trial curves over the held-out variations.
type OODSeries struct {
	ScorePerTrial   []float64 `json:"score_per_trial"`   // mean over variations, trial 1..K
	SuccessPerTrial []float64 `json:"success_per_trial"` // success rate per trial
	TipsPerTrial    []int     `json:"tips_per_trial"`    // tips written after each trial (memory on)
	Improvement     float64   `json:"improvement"`       // score of trial K − score of trial 1
	ImprovementPct  float64   `json:"improvement_pct"`   // 100·Improvement/|score of trial 1| (0 when that is 0)
}

// OODReport is `empo2 eval --ood --json`'s object: memory on (tips
// written after each trial) against the control without memory.
type OODReport struct {
	Tasks      []string  `json:"tasks"`
	Variations int       `json:"variations"`
	Trials     int       `json:"trials"`
	MemoryOn   OODSeries `json:"memory_on"`
	MemoryOff  OODSeries `json:"memory_off"` // the control: same trials, no memory, no tips
}
