package llama

/*
#include <stdlib.h>
#include "ggml-backend.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Device is a ggml compute device known to this process.
type Device struct {
	Name, Description string
	Kind              string // "cpu", "gpu", "igpu" or "accel"
}

// Devices lists the registered ggml devices (the CPU, plus GPUs of backends
// loaded with LoadBackend).
func Devices() []Device {
	initBackend()
	n := int(C.ggml_backend_dev_count())
	out := make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d := C.ggml_backend_dev_get(C.size_t(i))
		kind := "accel"
		switch C.ggml_backend_dev_type(d) {
		case C.GGML_BACKEND_DEVICE_TYPE_CPU:
			kind = "cpu"
		case C.GGML_BACKEND_DEVICE_TYPE_GPU:
			kind = "gpu"
		case C.GGML_BACKEND_DEVICE_TYPE_IGPU:
			kind = "igpu"
		}
		out = append(out, Device{C.GoString(C.ggml_backend_dev_name(d)), C.GoString(C.ggml_backend_dev_description(d)), kind})
	}
	return out
}

// LoadBackend loads a ggml backend library (e.g. bin/libggml-cuda.so built
// by `make cuda`) so that ModelParams.GPULayers can offload to its devices.
// Call it before loading models.
func LoadBackend(path string) error {
	initBackend()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	reg := C.ggml_backend_load(cpath)
	if reg == nil {
		return fmt.Errorf("%w: cannot load ggml backend %s (see log)", ErrModelLoad, path)
	}
	return wrapBackendReset(reg)
}
