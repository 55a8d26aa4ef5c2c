// Package optim updates the trained weights: the optimizer side of RL and
// SFT training.
//
//   - optim.go: AdamW (Loshchilov & Hutter 2019, decoupled weight decay,
//     with Adam's bias correction, Kingma & Ba 2015) over [][]float32
//     tensors, and global gradient-norm clipping, in Go: the float64
//     reference and the fallback for policies that cannot step on their
//     backend (the Updater uses cgo.Model.AdamWStep, on the training
//     backend, otherwise).
//   - schedule.go: constant and cosine (Loshchilov & Hutter 2017)
//     learning-rate schedules, both with linear warmup.
//   - update.go: the Updater accumulates gradients of micro-batches from
//     the ggml training graph (package cgo), clips and steps AdamW on the
//     training backend, and pushes the new adapter into the rollout model
//     (package llama; llama.Adapter.SetTensors replaces all tensors at
//     once) without reloading or merging.
//   - full.go: the FullUpdater, the same update over every weight of a
//     small F32 model (full SFT), and its state file.
//   - state.go, checkpoint.go: a training-state file (adapter + AdamW
//     moments + step + schedule + RNG; its format's names are package
//     statefile's) written atomically for bit-exact resume, and a run
//     directory's checkpoints/ with its `latest` pointer.
//
// Conventions:
//
//   - One adapter representation (lora.Adapter) and one parameter order
//     (lora.Less) throughout: the policy's tensors, the moments and the
//     state file line up index by index, nothing is permuted.
//   - A failed step changes nothing (parameters, moments and step count
//     stay as they were); a non-finite gradient is ErrNonFinite.
//   - Errors are sentinels wrapped with %w: ErrConfig, ErrShape,
//     ErrNonFinite, ErrUpdate, ErrState, ErrCheckpoint.
//   - optim knows nothing of rollouts or of EMPO²'s modes; it imports no
//     other trainer package.
package optim
