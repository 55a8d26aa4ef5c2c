package llama

/*
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/src
#include <stddef.h>
#include <stdlib.h>
#include "ggml-backend-impl.h"

// A use-after-free in the pinned module, worked around here.
//
// The module's ggml_backend_sched_free calls each backend's iface.reset (an
// ollama addition; CUDA's drops its memory pools). llama_context declares its
// scheduler before its backends, so C++ destroys the backends first and the
// scheduler's free then calls reset through a freed CUDA backend: llama_free
// crashes (SIGSEGV in ggml_backend_cuda_reset, measured on an H100). The CPU
// backend has no reset, so CPU-only runs never see it.
//
// Every backend created on a device of a loaded backend library is therefore
// created with reset = NULL: its pools are then freed with the backend itself
// (ggml_backend_free), which the scheduler's free never touches. The devices'
// init_backend is wrapped; the originals are kept per device.

enum { EMPO_MAX_WRAPPED_DEVS = 64 };

static struct {
	ggml_backend_dev_t dev;
	ggml_backend_t (*init)(ggml_backend_dev_t dev, const char * params);
} empo_wrapped[EMPO_MAX_WRAPPED_DEVS];
static int empo_n_wrapped;

static ggml_backend_t empo_init_backend_noreset(ggml_backend_dev_t dev, const char * params) {
	for (int i = 0; i < empo_n_wrapped; i++) {
		if (empo_wrapped[i].dev == dev) {
			ggml_backend_t b = empo_wrapped[i].init(dev, params);
			if (b) b->iface.reset = NULL;
			return b;
		}
	}
	return NULL;
}

// empo_wrap_reg_devices wraps the devices of reg (idempotent); returns how
// many devices are wrapped now, or -1 when the table is full.
static int empo_wrap_reg_devices(ggml_backend_reg_t reg) {
	size_t n = ggml_backend_reg_dev_count(reg);
	for (size_t i = 0; i < n; i++) {
		ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, i);
		if (!dev || !dev->iface.init_backend || dev->iface.init_backend == empo_init_backend_noreset) continue;
		if (empo_n_wrapped == EMPO_MAX_WRAPPED_DEVS) return -1;
		empo_wrapped[empo_n_wrapped].dev  = dev;
		empo_wrapped[empo_n_wrapped].init = dev->iface.init_backend;
		empo_n_wrapped++;
		dev->iface.init_backend = empo_init_backend_noreset;
	}
	return empo_n_wrapped;
}

// ---- a stand-in device for the test (a backend whose reset must vanish)
static int empo_fake_resets, empo_fake_frees;
static void empo_fake_reset(ggml_backend_t b) { (void) b; empo_fake_resets++; }
static void empo_fake_free(ggml_backend_t b) { empo_fake_frees++; free(b); }
static const char * empo_fake_name(ggml_backend_t b) { (void) b; return "fake"; }
static ggml_backend_t empo_fake_init(ggml_backend_dev_t dev, const char * params) {
	(void) params;
	ggml_backend_t b = (ggml_backend_t) calloc(1, sizeof(struct ggml_backend));
	b->iface.get_name = empo_fake_name;
	b->iface.free  = empo_fake_free;
	b->iface.reset = empo_fake_reset;
	b->device = dev;
	return b;
}
static size_t empo_fake_reg_dev_count(ggml_backend_reg_t reg) { (void) reg; return 1; }
static struct ggml_backend_device empo_fake_dev;
static ggml_backend_dev_t empo_fake_reg_dev_get(ggml_backend_reg_t reg, size_t i) { (void) reg; (void) i; return &empo_fake_dev; }
static struct ggml_backend_reg empo_fake_reg;

// empo_fake_check: wraps a stand-in registry twice, creates a backend through
// ggml_backend_dev_init and reports whether its reset is gone (1), the
// numbers of wrapped devices after each wrap in *n1, *n2, and frees the
// backend.
static int empo_fake_check(int * n1, int * n2, int * resets, int * frees) {
	empo_fake_dev.iface.init_backend = empo_fake_init;
	empo_fake_dev.reg = &empo_fake_reg;
	empo_fake_reg.iface.get_device_count = empo_fake_reg_dev_count;
	empo_fake_reg.iface.get_device = empo_fake_reg_dev_get;
	*n1 = empo_wrap_reg_devices(&empo_fake_reg);
	*n2 = empo_wrap_reg_devices(&empo_fake_reg);
	ggml_backend_t b = ggml_backend_dev_init(&empo_fake_dev, NULL);
	if (!b) return -1;
	int gone = b->iface.reset == NULL;
	ggml_backend_free(b);
	*resets = empo_fake_resets;
	*frees  = empo_fake_frees;
	return gone;
}
*/
import "C"

import "fmt"

// wrapBackendReset makes every backend created on the devices of reg free
// its resources with the backend rather than on the scheduler's free, which
// the module runs after llama_context has freed the backends (see the C
// comment above).
func wrapBackendReset(reg C.ggml_backend_reg_t) error {
	if C.empo_wrap_reg_devices(reg) < 0 {
		return fmt.Errorf("%w: more than %d devices", ErrModelLoad, int(C.EMPO_MAX_WRAPPED_DEVS))
	}
	return nil
}

// fakeResetCheck runs empo_fake_check (for the test): whether a backend
// created on a wrapped stand-in device has no reset, the numbers of wrapped
// devices after wrapping the same registry once and twice, and the
// stand-in's reset and free counts.
func fakeResetCheck() (gone bool, wrapped1, wrapped2, resets, frees int) {
	var n1, n2, r, f C.int
	g := C.empo_fake_check(&n1, &n2, &r, &f)
	return g == 1, int(n1), int(n2), int(r), int(f)
}
