// simdev.h — a host-memory stand-in for a GPU: one ggml backend device
// ("SIM0", type GPU) whose buffers live in host memory but are not host
// buffers to ggml (is_host false), so that ggml_backend_sched treats it as
// a separate device: weights in its buffers pull their ops onto it, inputs
// and tensors crossing between it and the CPU are copied, graphs are split.
// Its backends compute with the CPU backend's kernels, so every value equals
// the CPU backend's bit for bit; what differs is only the scheduling and the
// copies — which is what it is for: device-only defects of the code around
// ggml (graphs shared between schedulers, inputs never copied, ops placed on
// the wrong side) show on any machine.
//
// Not a real accelerator: no async, no events, no host buffer type; its
// memory is the system's (reported as the CPU device's).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Registers the stand-in's backend registry with ggml (idempotent): from
// then on ggml_backend_dev_count() includes SIM0, llama.cpp offloads
// n_gpu_layers to it and ggml_backend_init_by_type(GPU) returns it.
// n_threads: CPU threads of each backend made on it (>= 1; llama.cpp resets
// them through the registry's "ggml_backend_set_n_threads"). Returns 0, or
// -1 when no CPU device is registered.
int empo_sim_register(int n_threads);

#ifdef __cplusplus
}
#endif
