package llama

/*
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/src
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include "ggml-backend-impl.h"
#include "llama.h"

// A use-after-free in the pinned module, worked around here.
//
// llama_context declares its scheduler before its backends, so C++ destroys
// the backends first; the module's ggml_backend_sched_free then reads each
// backend's iface.reset (an ollama addition) through the freed backend and,
// when it is not NULL, calls it. Two failures follow:
//   - CUDA: reset drops the memory pools of a freed backend (SIGSEGV in
//     ggml_backend_cuda_reset, measured on an H100);
//   - any backend, CPU included: the read itself is of freed memory. When
//     the page is gone or the block reused, llama_free dies in
//     ggml_backend_sched_free (SIGSEGV at the load of iface.reset: the flaky
//     CI crash of stop 50; with glibc's freed-memory fill it calls
//     0xa5a5a5a5a5a5a5a5, TestContextCloseFreesSchedulerBeforeBackends).
//
// Every device of every registry is therefore wrapped: a backend created on
// it has reset = NULL (its pools are freed with the backend itself) and a
// free that, inside empo_llama_free / empo_init_from_model (the only places
// where llama.cpp frees a context's backends), is deferred until llama.cpp
// has returned, i.e. until the scheduler that reads the backend is gone.
// Anywhere else a backend is freed at once by its own free. The devices'
// init_backend is wrapped; the originals are kept per device.

enum { EMPO_MAX_WRAPPED_DEVS = 64, EMPO_MAX_DEFERRED = 64 };

typedef void (*empo_backend_free_fn)(ggml_backend_t backend);

static struct {
	ggml_backend_dev_t dev;
	ggml_backend_t (*init)(ggml_backend_dev_t dev, const char * params);
	empo_backend_free_fn free; // the free of this device's backends, seen at their first init
} empo_wrapped[EMPO_MAX_WRAPPED_DEVS];
static int empo_n_wrapped;
static pthread_mutex_t empo_wrapped_mu = PTHREAD_MUTEX_INITIALIZER;

// the backends whose free is deferred on this thread (a llama_free runs on
// one thread); depth > 0 while llama.cpp frees a context here
static _Thread_local int empo_defer_depth;
static _Thread_local int empo_n_deferred;
static _Thread_local struct { ggml_backend_t b; empo_backend_free_fn free; } empo_deferred[EMPO_MAX_DEFERRED];
static int empo_deferred_total; // backends whose free was deferred (the test reads it)

static empo_backend_free_fn empo_original_free(ggml_backend_dev_t dev) {
	empo_backend_free_fn f = NULL;
	pthread_mutex_lock(&empo_wrapped_mu);
	for (int i = 0; i < empo_n_wrapped; i++) {
		if (empo_wrapped[i].dev == dev) { f = empo_wrapped[i].free; break; }
	}
	pthread_mutex_unlock(&empo_wrapped_mu);
	return f;
}

static void empo_backend_free(ggml_backend_t b) {
	empo_backend_free_fn f = empo_original_free(b->device);
	if (empo_defer_depth > 0 && empo_n_deferred < EMPO_MAX_DEFERRED) {
		empo_deferred[empo_n_deferred].b = b;
		empo_deferred[empo_n_deferred].free = f;
		empo_n_deferred++;
		__atomic_add_fetch(&empo_deferred_total, 1, __ATOMIC_RELAXED);
		return;
	}
	f(b);
}

static void empo_defer_begin(void) { empo_defer_depth++; }

static void empo_defer_end(void) {
	if (--empo_defer_depth > 0) return;
	for (int i = 0; i < empo_n_deferred; i++) empo_deferred[i].free(empo_deferred[i].b);
	empo_n_deferred = 0;
}

static ggml_backend_t empo_init_backend_wrapped(ggml_backend_dev_t dev, const char * params) {
	ggml_backend_t (*init)(ggml_backend_dev_t, const char *) = NULL;
	int k = -1;
	pthread_mutex_lock(&empo_wrapped_mu);
	for (int i = 0; i < empo_n_wrapped; i++) {
		if (empo_wrapped[i].dev == dev) { init = empo_wrapped[i].init; k = i; break; }
	}
	pthread_mutex_unlock(&empo_wrapped_mu);
	if (!init) return NULL;
	ggml_backend_t b = init(dev, params);
	if (!b) return NULL;
	b->iface.reset = NULL;
	if (b->device != dev || !b->iface.free || b->iface.free == empo_backend_free) return b;
	int ok;
	pthread_mutex_lock(&empo_wrapped_mu);
	if (!empo_wrapped[k].free) empo_wrapped[k].free = b->iface.free;
	ok = empo_wrapped[k].free == b->iface.free; // one free per device, or the backend keeps its own
	pthread_mutex_unlock(&empo_wrapped_mu);
	if (ok) b->iface.free = empo_backend_free;
	return b;
}

// empo_wrap_reg_devices wraps the devices of reg (idempotent); returns how
// many devices are wrapped now, or -1 when the table is full.
static int empo_wrap_reg_devices(ggml_backend_reg_t reg) {
	int n_out;
	pthread_mutex_lock(&empo_wrapped_mu);
	size_t n = ggml_backend_reg_dev_count(reg);
	for (size_t i = 0; i < n; i++) {
		ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, i);
		if (!dev || !dev->iface.init_backend || dev->iface.init_backend == empo_init_backend_wrapped) continue;
		if (empo_n_wrapped == EMPO_MAX_WRAPPED_DEVS) { pthread_mutex_unlock(&empo_wrapped_mu); return -1; }
		empo_wrapped[empo_n_wrapped].dev  = dev;
		empo_wrapped[empo_n_wrapped].init = dev->iface.init_backend;
		empo_wrapped[empo_n_wrapped].free = NULL;
		empo_n_wrapped++;
		dev->iface.init_backend = empo_init_backend_wrapped;
	}
	n_out = empo_n_wrapped;
	pthread_mutex_unlock(&empo_wrapped_mu);
	return n_out;
}

static void empo_llama_free(struct llama_context * ctx) {
	empo_defer_begin();
	llama_free(ctx);
	empo_defer_end();
}

// llama_init_from_model frees what it built when it fails (in the same
// order as llama_free).
static struct llama_context * empo_init_from_model(struct llama_model * model, struct llama_context_params p) {
	empo_defer_begin();
	struct llama_context * ctx = llama_init_from_model(model, p);
	empo_defer_end();
	return ctx;
}

static int empo_deferred_frees(void) { return __atomic_load_n(&empo_deferred_total, __ATOMIC_RELAXED); }

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
// numbers of wrapped devices after each wrap in *n1, *n2; frees it (at once:
// *frees_now), then creates a second one and frees it inside a deferral
// (*frees_deferred: the count before the deferral ends).
static int empo_fake_check(int * n1, int * n2, int * resets, int * frees, int * frees_now, int * frees_deferred) {
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
	*frees_now = empo_fake_frees; // outside a context's free: freed at once
	b = ggml_backend_dev_init(&empo_fake_dev, NULL);
	if (!b) return -1;
	empo_defer_begin();
	ggml_backend_free(b);
	*frees_deferred = empo_fake_frees; // inside: not yet
	empo_defer_end();
	*resets = empo_fake_resets;
	*frees  = empo_fake_frees;
	return gone;
}
*/
import "C"

import "fmt"

// wrapBackendReset wraps the devices of reg (see the C comment above): a
// backend created on them has no reset, and its free waits until the
// llama_free that frees it has freed the scheduler reading it.
func wrapBackendReset(reg C.ggml_backend_reg_t) error {
	if C.empo_wrap_reg_devices(reg) < 0 {
		return fmt.Errorf("%w: more than %d devices", ErrModelLoad, int(C.EMPO_MAX_WRAPPED_DEVS))
	}
	return nil
}

// wrapAllBackends wraps the devices of every registered backend (the CPU's
// included); initBackend calls it once.
func wrapAllBackends() error {
	for i := C.size_t(0); i < C.ggml_backend_reg_count(); i++ {
		if err := wrapBackendReset(C.ggml_backend_reg_get(i)); err != nil {
			return err
		}
	}
	return nil
}

// llamaFree is llama_free with the context's backends freed after its
// scheduler (every llama_free goes through it).
func llamaFree(c *C.struct_llama_context) { C.empo_llama_free(c) }

// initFromModel is llama_init_from_model whose failure path frees the
// backends after the scheduler too.
func initFromModel(m *C.struct_llama_model, p C.struct_llama_context_params) *C.struct_llama_context {
	return C.empo_init_from_model(m, p)
}

// deferredBackendFrees is how many backend frees waited for their
// context's scheduler so far in this process.
func deferredBackendFrees() int { return int(C.empo_deferred_frees()) }

// fakeResetCheck runs empo_fake_check (for the test): whether a backend
// created on a wrapped stand-in device has no reset, the numbers of wrapped
// devices after wrapping the same registry once and twice, the stand-in's
// reset and free counts at the end, the frees right after a free outside a
// context's free (1: at once), and inside one before it ends (still 1).
func fakeResetCheck() (gone bool, wrapped1, wrapped2, resets, frees, freesNow, freesDeferred int) {
	var n1, n2, r, f, fn, fd C.int
	g := C.empo_fake_check(&n1, &n2, &r, &f, &fn, &fd)
	return g == 1, int(n1), int(n2), int(r), int(f), int(fn), int(fd)
}
