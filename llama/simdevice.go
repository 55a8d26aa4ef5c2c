package llama

/*
#include "simdev.h"
*/
import "C"

import "fmt"

// SimDevice is the name of the device RegisterSimDevice adds.
const SimDevice = "SIM0"

// RegisterSimDevice adds a host-memory stand-in for a GPU to this process's
// ggml devices (idempotent; there is no way back): a GPU-type device,
// SimDevice, whose buffers the CPU backend does not read directly, so that
// ggml's scheduler treats it as a separate device — ops whose weights live
// on it run on it, tensors crossing between it and the CPU are copied,
// graphs are split — while its backends compute with the CPU kernels, so
// every value equals the CPU backend's bit for bit. From then on
// ModelParams.GPULayers offloads to it and the training engine's Device
// "gpu" (cgo.Options) runs on it: the device-only code paths (scheduler
// splits, input copies, weights shared with llama.cpp) run and can be
// compared with the CPU on any machine (`empo2 --backend sim`, docs/gpu.md).
// threads: CPU threads of its backends (llama.cpp contexts set their own).
func RegisterSimDevice(threads int) error {
	initBackend()
	if C.empo_sim_register(C.int(max(threads, 1))) != 0 {
		return fmt.Errorf("%w: cannot register the %s stand-in device (no CPU device)", ErrModelLoad, SimDevice)
	}
	return wrapAllBackends() // its backends too are freed after a context's scheduler
}
