// Package demos makes demonstrations for SFT (`empo2 env demos`): episodes
// played by a known action sequence (gold, or explore: the gold work with
// an observable room search), written as chat records in the rollouts'
// prompt format with a tip-writing turn, and tip records whose prompts
// carry tips retrieved from a memory of the demo and of failed attempts.
// Run is the whole command as one library call (RunConfig: its documented
// configuration, as sft.Run's and evaluate.Run's), PickTasks the task
// selection it shares with `empo2 sft eval`.
//
// Conventions:
//
//   - Records are built with rollout.Messages / rollout.TipMessages and
//     stored as sft.ChatRecord, so SFT trains on exactly what the policy
//     sees at RL time.
//   - Room tracking reads ScienceWorld-style observations ("This room is
//     called the …", "A door to the … (", "You move to the …").
//   - Errors are sentinels wrapped with %w: ErrDemo.
package demos
