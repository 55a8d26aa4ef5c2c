// Package trainer updates LoRA adapters for EMPO².
//
// So far it holds the optimizer side of training:
//
//   - optim.go: AdamW (Loshchilov & Hutter 2019, decoupled weight decay, with
//     Adam's bias correction, Kingma & Ba 2015) over [][]float32 tensors, and
//     global gradient-norm clipping.
//   - schedule.go: constant and cosine (Loshchilov & Hutter 2017) learning-rate
//     schedules, both with linear warmup.
//   - update.go: an Updater that accumulates gradients of micro-batches from
//     the ggml training graph (package cgo), clips, steps AdamW, writes the
//     parameters back and pushes them into the rollout model (package llama)
//     without reloading or merging.
//   - state.go: a training-state file (adapter + AdamW moments + step +
//     schedule + RNG) written atomically, for bit-exact resume.
//
// The EMPO² loop (rollouts, memory, advantages) builds on these later.
package trainer
