// Package sft is supervised fine-tuning (`empo2 sft`): cross-entropy on
// the assistant tokens of chat records, through the same training engine
// as the RL updates, LoRA (optim.Updater) or every weight
// (optim.FullUpdater).
//
// Conventions:
//
//   - Data are JSON Lines of ChatRecord ({"messages": [...]}), tokenized by
//     rollout.Renderer exactly as the rollouts render prompts; the loss
//     covers every assistant content and its end-of-turn token.
//   - Train is resumable bit for bit: a checkpoint holds the updater's
//     state and the epoch and mini-batch reached; shuffling depends only on
//     (seed, epoch).
//   - Errors are sentinels wrapped with %w: ErrData for bad data,
//     optim.ErrConfig for bad settings.
package sft
