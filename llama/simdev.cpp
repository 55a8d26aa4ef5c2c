// simdev.cpp — the host-memory stand-in for a GPU (see simdev.h). Written
// against the pinned module's ggml-backend-impl.h: a buffer type, a device,
// a registry and a backend, each delegating the work to the CPU backend.

#include "simdev.h"

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <atomic>
#include <cstring>
#include <mutex>

namespace {

constexpr const char * SIM_NAME = "SIM0";

std::atomic<int> sim_threads{1};

// ---- buffer type: CPU buffers relabelled, so that is_host is false
ggml_backend_buffer_type sim_buft_obj;

const char * sim_buft_get_name(ggml_backend_buffer_type_t) { return SIM_NAME; }

ggml_backend_buffer_t sim_buft_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
    if (b) b->buft = buft; // the CPU buffer's own functions (memcpy, aligned free) still apply
    return b;
}

size_t sim_buft_get_alignment(ggml_backend_buffer_type_t) {
    return ggml_backend_buft_get_alignment(ggml_backend_cpu_buffer_type());
}

bool sim_buft_is_host(ggml_backend_buffer_type_t) { return false; }

// ---- backend: a CPU backend underneath
struct sim_backend_ctx {
    ggml_backend_t cpu;
};

ggml_guid sim_guid = { 0x65, 0x6d, 0x70, 0x6f, 0x32, 0x2d, 0x73, 0x69, 0x6d, 0x2d, 0x64, 0x65, 0x76, 0x69, 0x63, 0x65 };

const char * sim_backend_get_name(ggml_backend_t) { return SIM_NAME; }

void sim_backend_free(ggml_backend_t backend) {
    auto * ctx = (sim_backend_ctx *) backend->context;
    ggml_backend_free(ctx->cpu);
    delete ctx;
    delete backend;
}

ggml_status sim_backend_graph_compute(ggml_backend_t backend, ggml_cgraph * cgraph, int batch_size) {
    (void) batch_size;
    return ggml_backend_graph_compute(((sim_backend_ctx *) backend->context)->cpu, cgraph);
}

void sim_set_n_threads(ggml_backend_t backend, int n_threads) {
    if (n_threads >= 1) ggml_backend_cpu_set_n_threads(((sim_backend_ctx *) backend->context)->cpu, n_threads);
}

ggml_backend_i sim_backend_iface() {
    ggml_backend_i i;
    memset(&i, 0, sizeof(i)); // every optional entry NULL: no async copies, events, plans, reserve or reset
    i.get_name      = sim_backend_get_name;
    i.free          = sim_backend_free;
    i.graph_compute = sim_backend_graph_compute;
    return i;
}

// ---- device
ggml_backend_device sim_dev_obj;
ggml_backend_dev_t  sim_cpu_dev = nullptr;

const char * sim_dev_get_name(ggml_backend_dev_t) { return SIM_NAME; }
const char * sim_dev_get_description(ggml_backend_dev_t) { return "host-memory stand-in for a GPU (empo2)"; }

void sim_dev_get_memory(ggml_backend_dev_t, size_t * free, size_t * total) {
    ggml_backend_dev_memory(sim_cpu_dev, free, total);
}

enum ggml_backend_dev_type sim_dev_get_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_GPU; }

void sim_dev_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    memset(props, 0, sizeof(*props));
    props->name        = sim_dev_get_name(dev);
    props->description = sim_dev_get_description(dev);
    props->type        = sim_dev_get_type(dev);
    sim_dev_get_memory(dev, &props->memory_free, &props->memory_total);
    props->caps = { /* async */ false, /* host_buffer */ false, /* buffer_from_host_ptr */ false, /* events */ false };
}

ggml_backend_t sim_dev_init_backend(ggml_backend_dev_t dev, const char *) {
    ggml_backend_t cpu = ggml_backend_cpu_init();
    if (!cpu) return nullptr;
    ggml_backend_cpu_set_n_threads(cpu, sim_threads.load());
    return new ggml_backend{ &sim_guid, sim_backend_iface(), dev, new sim_backend_ctx{ cpu } };
}

ggml_backend_buffer_type_t sim_dev_get_buffer_type(ggml_backend_dev_t) { return &sim_buft_obj; }

// the CPU kernels run every op the CPU backend runs
bool sim_dev_supports_op(ggml_backend_dev_t, const ggml_tensor * op) {
    return ggml_backend_dev_supports_op(sim_cpu_dev, op);
}

// only its own buffers, as a discrete GPU (ggml-cuda accepts no host buffer
// type on a non-integrated device)
bool sim_dev_supports_buft(ggml_backend_dev_t, ggml_backend_buffer_type_t buft) { return buft == &sim_buft_obj; }

// never asks for ops whose weights are in host memory (ggml_backend_sched's
// op_offload): those stay on the CPU
bool sim_dev_offload_op(ggml_backend_dev_t, const ggml_tensor *) { return false; }

// ---- registry
ggml_backend_reg sim_reg_obj;

const char * sim_reg_get_name(ggml_backend_reg_t) { return "SIM"; }
size_t sim_reg_get_device_count(ggml_backend_reg_t) { return 1; }
ggml_backend_dev_t sim_reg_get_device(ggml_backend_reg_t, size_t index) { return index == 0 ? &sim_dev_obj : nullptr; }

void * sim_reg_get_proc_address(ggml_backend_reg_t, const char * name) {
    if (strcmp(name, "ggml_backend_set_n_threads") == 0) return (void *) (ggml_backend_set_n_threads_t) sim_set_n_threads;
    return nullptr;
}

std::once_flag sim_once;
int            sim_status = 0;

void sim_init() {
    sim_cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!sim_cpu_dev) {
        sim_status = -1;
        return;
    }
    memset(&sim_buft_obj, 0, sizeof(sim_buft_obj));
    sim_buft_obj.iface.get_name      = sim_buft_get_name;
    sim_buft_obj.iface.alloc_buffer  = sim_buft_alloc;
    sim_buft_obj.iface.get_alignment = sim_buft_get_alignment;
    sim_buft_obj.iface.is_host       = sim_buft_is_host;
    sim_buft_obj.device              = &sim_dev_obj;

    memset(&sim_dev_obj, 0, sizeof(sim_dev_obj));
    sim_dev_obj.iface.get_name        = sim_dev_get_name;
    sim_dev_obj.iface.get_description = sim_dev_get_description;
    sim_dev_obj.iface.get_memory      = sim_dev_get_memory;
    sim_dev_obj.iface.get_type        = sim_dev_get_type;
    sim_dev_obj.iface.get_props       = sim_dev_get_props;
    sim_dev_obj.iface.init_backend    = sim_dev_init_backend;
    sim_dev_obj.iface.get_buffer_type = sim_dev_get_buffer_type;
    sim_dev_obj.iface.supports_op     = sim_dev_supports_op;
    sim_dev_obj.iface.supports_buft   = sim_dev_supports_buft;
    sim_dev_obj.iface.offload_op      = sim_dev_offload_op;
    sim_dev_obj.reg                   = &sim_reg_obj;

    memset(&sim_reg_obj, 0, sizeof(sim_reg_obj));
    sim_reg_obj.api_version             = GGML_BACKEND_API_VERSION;
    sim_reg_obj.iface.get_name          = sim_reg_get_name;
    sim_reg_obj.iface.get_device_count  = sim_reg_get_device_count;
    sim_reg_obj.iface.get_device        = sim_reg_get_device;
    sim_reg_obj.iface.get_proc_address  = sim_reg_get_proc_address;
    ggml_backend_register(&sim_reg_obj);
}

} // namespace

extern "C" int empo_sim_register(int n_threads) {
    try {
        sim_threads.store(n_threads >= 1 ? n_threads : 1);
        std::call_once(sim_once, sim_init);
        return sim_status;
    } catch (...) {
        return -1;
    }
}
