// Package evaluate measures a policy: offline evaluation with memory off,
// on or both (Evaluate), out-of-distribution adaptation trials with a
// fresh memory and no weight updates (EvaluateOOD), the periodic
// evaluation of a training run (Periodic, one eval.jsonl Line), and greedy
// episodes (GreedyEpisode, `empo2 sft eval`).
//
// Conventions:
//
//   - Evaluation plays with the rollout engine of training (rollout.Roller)
//     so that it measures exactly what training samples; both memory
//     settings run the same jobs with the same seeds.
//   - Config is the `eval` section of a run configuration (YAML keys,
//     documentation and defaults here); its untagged fields are set by the
//     caller.
//   - Evaluation never changes the memory unless Config.WriteTips says so.
//   - Errors are sentinels wrapped with %w: ErrEval, rollout.ErrNoMemory.
package evaluate
