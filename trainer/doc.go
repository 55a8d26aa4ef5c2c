// Package trainer updates LoRA adapters for EMPO².
//
// So far it holds the optimizer side of training:
//
//   - optim.go: AdamW (Loshchilov & Hutter 2019, decoupled weight decay, with
//     Adam's bias correction, Kingma & Ba 2015) over [][]float32 tensors, and
//     global gradient-norm clipping, in Go: the float64 reference and the
//     fallback for policies that cannot step on their backend (the
//     Updater uses cgo.Model.AdamWStep, on the training backend, otherwise).
//   - schedule.go: constant and cosine (Loshchilov & Hutter 2017) learning-rate
//     schedules, both with linear warmup.
//   - update.go: an Updater that accumulates gradients of micro-batches from
//     the ggml training graph (package cgo), clips and steps AdamW on the
//     training backend, and pushes the new adapter into the rollout model
//     (package llama; llama.Adapter.SetTensors replaces all tensors at once)
//     without reloading or merging. One adapter representation
//     (lora.Adapter) and one parameter order (lora.Less) throughout: the
//     policy's tensors, the moments and the state file line up index by
//     index, nothing is permuted.
//   - state.go: a training-state file (adapter + AdamW moments + step +
//     schedule + RNG) written atomically, for bit-exact resume.
//
// The EMPO² loop (rollouts, memory, advantages) builds on these later.
package trainer
