// Package trainer is the EMPO² training loop (`empo2 train`): it composes
// the rollout engine, the tips memory and the LoRA optimizer into runs.
//
// A training step (Loop.Step) plans B task variations × G rollouts and
// their EMPO² modes from (seed, step) (PlanStep, algo.DrawMode: u < p·q
// off-policy, u < p on-policy with tips, else on-policy; each job carries
// its mode, and its episode on to the update), plays them
// (rollout.Roller), writes one tip per episode into the memory, turns the
// episodes into training sequences (BuildSamples: GRPO group advantages,
// the off-policy input without tips, low-probability masking, packing of an episode's
// steps into one sequence) and runs the PPO updates (RunUpdates over an
// optim.Updater); the step's record (StepMetrics, the run-files record
// runfiles.Metrics) is gathered by its own methods. Train opens a run
// (openRun: checks everything — configuration ranges, the directory's
// ownership and lock, a resume's state and invariants, the model, the
// first prompt's length — before it writes anything; one Close releases
// every resource) and runs or resumes the steps, every write crash-safe.
// The run directory's files (run.json, config.yaml, memory.db,
// metrics.jsonl, eval.jsonl, checkpoints/) are named by package runfiles,
// which `empo2 report` reads.
//
// The EMPO² maths itself — the mode draw, group advantages with the
// novelty bonus, low-probability masking, the clipped / dual-clip
// surrogate — is package algo (pure Go, beside trainer); the loop calls it
// and defines none of it. The sub-packages hold the other roles, so that a
// folder names what it holds:
//
//   - rollout: the Roller (batched episodes with per-episode KV), the one
//     prompt format (Renderer, Messages, ParseAction), tips and the memory
//     side of a rollout (retrieval, WriteTips, OpenEmbedder).
//   - optim: AdamW, learning-rate schedules, the Updater (LoRA) and the
//     FullUpdater (every weight), training-state files and checkpoints.
//   - sft: supervised fine-tuning on chat records (LoRA or full).
//   - evaluate: offline evaluation with memory off/on, OOD adaptation
//     trials, the periodic evaluation of a run, greedy episodes.
//   - demos: demonstrations and tip records for SFT.
//
// Conventions:
//
//   - Layering: the sub-packages never import trainer (go list -deps shows
//     it); trainer imports them. rollout imports neither optim nor cgo;
//     sft and demos build on rollout's prompt format.
//   - One Go type per configuration section, defined and defaulted in the
//     package that reads it (rollout.Config, rollout.MemoryConfig,
//     evaluate.Config, environments.Options; the loop's sections here) and
//     documented by its fields' doc tags; Config composes them and package
//     internal/config decodes (strictly), overrides (--set), prints and
//     tabulates them (docs/train.md).
//   - Modes and choices are typed strings (Mode, Per, LowProbMask, OldLogp;
//     rollout.History, rollout.ActionFormat, rollout.End,
//     evaluate.MemorySetting, optim.ScheduleKind, cgo.Aggregation,
//     demos.Kind); those read from a configuration have a Valid method that
//     validation uses, and YAML spells them exactly as their constants.
//   - Every random draw of step k derives from (seed, k) (stepRNG), so a
//     resumed run repeats exactly what an uninterrupted one would do.
//   - Errors are typed: sentinels (ErrRunConfig, ErrTrain, ErrSamples, …)
//     wrapped with %w.
package trainer
