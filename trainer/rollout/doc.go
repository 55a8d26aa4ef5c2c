// Package rollout plays episodes with the policy: the rollout engine of
// training and evaluation.
//
//   - rollout.go: the engine — the Roller runs many episodes at once
//     against one llama.Context, each with its own KV sequence for its
//     whole life, one batched decode per turn; memory episodes retrieve
//     tips before every action (EMPO² §3), as the reference code does
//     (conversation keys, tips kept in every turn; MemoryConfig).
//   - episode.go: what the engine plays and returns — Job (with its EMPO²
//     mode, algo.Mode, which its Episode carries on to the update),
//     StepRecord, Episode, End, Stats.
//   - config.go: the configuration types — Config (the `rollout` section),
//     MemoryConfig (`memory`), their enumerations and defaults.
//   - prompt.go: the one prompt format of empo2 (Messages, Renderer,
//     ParseAction): rollouts, eval, SFT demonstrations and SFT data all
//     build their chats with it, so what a model is trained on is token for
//     token what it sees when it acts.
//   - tips.go: tip writing and injection (the tip block, memory entries of
//     an episode); the intrinsic reward 1/(count+1) is algo.IntrinsicReward.
//   - memory.go: the memory side of a rollout: OpenEmbedder and WriteTips.
//
// Conventions:
//
//   - Config is the `rollout` section of a run configuration and
//     MemoryConfig its `memory` section: YAML keys, documentation (doc
//     tags) and defaults (DefaultConfig, DefaultMemoryConfig) live in
//     config.go.
//     Options carry what is not a section: the environment, the store, the
//     run seed and the success score.
//   - Sampling is deterministic for fixed seeds: an episode samples turn t
//     from its own generator (MixSeed(run seed, job seed), stream t),
//     whatever else runs beside it.
//   - Errors are sentinels wrapped with %w: ErrRollout, ErrNoMemory,
//     ErrPrompt, ErrTemplate.
//   - rollout imports no other trainer package and no training graph
//     (the EMPO² maths it needs, the mode and the bonus, are package algo).
package rollout
