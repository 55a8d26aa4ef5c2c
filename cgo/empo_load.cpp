// empo_load.cpp — the frozen model: GGUF files (one or split), hyperparameters, the
// weights and their transposed copies Wᵀ, the LoRA pairs (load_model); the same
// on a loaded llama.cpp model's own tensors (load_shared).

#include "empo_train_internal.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace empo {

// ---------------------------------------------------------------- GGUF loading

static int64_t gguf_int(const gguf_context * g, const std::string & key, int64_t def, bool required) {
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) {
        if (required) throw empo_error(EMPO_ERR_ARCH, "missing GGUF key " + key);
        return def;
    }
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_UINT8:  return gguf_get_val_u8 (g, id);
        case GGUF_TYPE_INT8:   return gguf_get_val_i8 (g, id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(g, id);
        case GGUF_TYPE_INT16:  return gguf_get_val_i16(g, id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(g, id);
        case GGUF_TYPE_INT32:  return gguf_get_val_i32(g, id);
        case GGUF_TYPE_UINT64: return (int64_t) gguf_get_val_u64(g, id);
        case GGUF_TYPE_INT64:  return gguf_get_val_i64(g, id);
        default: throw empo_error(EMPO_ERR_ARCH, "GGUF key " + key + " is not an integer");
    }
}

static float gguf_float(const gguf_context * g, const std::string & key, float def) {
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) return def;
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_FLOAT32: return gguf_get_val_f32(g, id);
        case GGUF_TYPE_FLOAT64: return (float) gguf_get_val_f64(g, id);
        default: return (float) gguf_int(g, key, 0, true);
    }
}

// The tensors of a GGUF model: one file, or every file of a model split by
// llama.cpp's gguf-split convention (given the first: split.count files
// named by llama_split_path, each with split.no, the metadata in the first,
// split.tensors.count tensors in all). Tensor ids run over the splits in
// order.
struct gguf_source {
    std::vector<gguf_context *> g;              // one per split; g[0] holds the metadata
    std::vector<FILE *>         f;
    std::vector<std::pair<int, int64_t>> at;    // tensor id -> (split, id in that split)
    std::unordered_map<std::string, int64_t> by_name;
    ~gguf_source() {
        for (gguf_context * x : g) gguf_free(x);
        for (FILE * x : f) fclose(x);
    }

    const gguf_context * meta() const { return g[0]; }
    int64_t n() const { return (int64_t) at.size(); }
    int64_t find(const std::string & name) const {
        auto it = by_name.find(name);
        return it == by_name.end() ? -1 : it->second;
    }
    ggml_type    type(int64_t id) const { return gguf_get_tensor_type(g[at[id].first], at[id].second); }
    size_t       size(int64_t id) const { return gguf_get_tensor_size(g[at[id].first], at[id].second); }
    const char * name(int64_t id) const { return gguf_get_tensor_name(g[at[id].first], at[id].second); }

    // opens one file and indexes its tensors
    void add(const std::string & path) {
        gguf_init_params gp = { /*no_alloc =*/ true, /*ctx =*/ nullptr };
        FILE * fp = fopen(path.c_str(), "rb");
        if (!fp) throw empo_error(EMPO_ERR_IO, "cannot open " + path);
        f.push_back(fp);
        gguf_context * c = gguf_init_from_file(path.c_str(), gp);
        if (!c) throw empo_error(EMPO_ERR_IO, "not a readable GGUF file: " + path);
        g.push_back(c);
        const int k = (int) g.size() - 1;
        for (int64_t i = 0; i < gguf_get_n_tensors(c); ++i) {
            if (!by_name.emplace(gguf_get_tensor_name(c, i), n()).second) {
                throw empo_error(EMPO_ERR_ARCH, std::string("tensor ") + gguf_get_tensor_name(c, i) + " appears twice in " + path);
            }
            at.push_back({k, i});
        }
    }

    // raw bytes of tensor `id` (its GGUF type and layout)
    std::vector<uint8_t> read(int64_t id) const {
        const gguf_context * c = g[at[id].first];
        const int64_t i = at[id].second;
        const size_t off  = gguf_get_data_offset(c) + gguf_get_tensor_offset(c, i);
        const size_t sz   = gguf_get_tensor_size(c, i);
        std::vector<uint8_t> buf(sz);
        FILE * fp = f[at[id].first];
        if (fseeko(fp, (off_t) off, SEEK_SET) != 0 || fread(buf.data(), 1, sz, fp) != sz) {
            throw empo_error(EMPO_ERR_IO, std::string("short read of tensor ") + gguf_get_tensor_name(c, i));
        }
        return buf;
    }
};

// the u16 split key `key` of c, or -1 when absent
static int split_key(const gguf_context * c, const char * key) {
    const int64_t id = gguf_find_key(c, key);
    if (id < 0) return -1;
    if (gguf_get_kv_type(c, id) != GGUF_TYPE_UINT16) throw empo_error(EMPO_ERR_ARCH, std::string(key) + " is not a u16");
    return gguf_get_val_u16(c, id);
}

// opens path and, when it is the first file of a split model, the others
static void open_source(gguf_source & src, const char * path) {
    src.add(path);
    const int n = split_key(src.meta(), "split.count");
    if (n <= 1) return;
    if (split_key(src.meta(), "split.no") != 0) {
        throw empo_error(EMPO_ERR_IO, std::string(path) + " is not the first split of its model: load that one");
    }
    std::vector<char> buf(strlen(path) + 64);
    if (llama_split_prefix(buf.data(), buf.size(), path, 0, n) <= 0) {
        throw empo_error(EMPO_ERR_IO, std::string(path) + ": the first of " + std::to_string(n) + " splits must be named <prefix>-00001-of-" +
                         std::to_string(100000 + n).substr(1) + ".gguf");
    }
    const std::string prefix = buf.data();
    for (int i = 1; i < n; ++i) {
        llama_split_path(buf.data(), buf.size(), prefix.c_str(), i, n);
        const std::string sp = buf.data();
        src.add(sp);
        if (split_key(src.g.back(), "split.no") != i || split_key(src.g.back(), "split.count") != n) {
            throw empo_error(EMPO_ERR_IO, sp + " is not split " + std::to_string(i + 1) + " of " + std::to_string(n));
        }
    }
    const int64_t kid = gguf_find_key(src.meta(), "split.tensors.count");
    if (kid < 0 || gguf_get_kv_type(src.meta(), kid) != GGUF_TYPE_INT32 || gguf_get_val_i32(src.meta(), kid) != src.n()) {
        throw empo_error(EMPO_ERR_IO, std::string(path) + ": split.tensors.count does not match the " + std::to_string(src.n()) + " tensors of the splits");
    }
}

// convert n elements of type `type` to F32
static std::vector<float> to_f32(const std::vector<uint8_t> & src, ggml_type type, int64_t n) {
    std::vector<float> out(n);
    if (type == GGML_TYPE_F32) {
        memcpy(out.data(), src.data(), n * sizeof(float));
        return out;
    }
    const auto * tr = ggml_get_type_traits(type);
    if (!tr || !tr->to_float) throw empo_error(EMPO_ERR_ARCH, std::string("cannot convert tensor type ") + ggml_type_name(type));
    tr->to_float(src.data(), out.data(), n);
    return out;
}

struct pending_upload {
    ggml_tensor *        t;
    std::vector<uint8_t> data;
};

// The type of Wᵀ for a frozen matrix of type `type`: its own, F16 for
// quantized types (their blocks run along rows, so Wᵀ holds the dequantized
// values), both stored and made in the graph.
ggml_type transposed_type(ggml_type type) {
    return ggml_is_quantized(type) ? GGML_TYPE_F16 : type;
}

// The tensor Wᵀ [n1, n0] of a frozen matrix t [n0, n1] (transposed_type), or
// nullptr with transpose_in_graph (the training graph then makes Wᵀ just
// before its use: in_graph_transposed). Registers m.transposed[t].
static ggml_tensor * new_transposed(empo_model & m, ggml_tensor * t) {
    if (m.cfg.transpose_in_graph) {
        m.transposed[t] = nullptr; // frozen; Wᵀ is made inside each training graph
        return nullptr;
    }
    ggml_tensor * tt = ggml_new_tensor_2d(m.ctx_w, transposed_type(t->type), t->ne[1], t->ne[0]);
    ggml_format_name(tt, "%s.T", t->name);
    m.transposed[t] = tt;
    m.bytes_transposed += (int64_t) ggml_nbytes(tt);
    return tt;
}

// One tile band of Wᵀ: source rows [r0, r0 + nr) of W (type st, rows of n0
// elements) written as columns r0.. of every row of tt = Wᵀ [n1, n0]. The
// band is read once (dequantized to F32 for a quantized W, by the type's
// to_float as to_f32 does) and written a tile of columns at a time, so that
// reads and writes stay in cache; quantized values become F16 with
// ggml_fp32_to_fp16_row's rounding. f: scratch for nr·n0 floats.
template <typename E>
static void transpose_band(const uint8_t * raw, ggml_type st, int64_t n0, int64_t n1, int64_t r0, int64_t nr,
                           uint8_t * dst, std::vector<float> & f) {
    constexpr int64_t TILE = 64;
    const size_t row = ggml_row_size(st, n0);
    if (ggml_is_quantized(st)) {
        const auto * tr = ggml_get_type_traits(st);
        for (int64_t r = 0; r < nr; ++r) tr->to_float(raw + (r0 + r) * row, f.data() + r * n0, n0);
        float col[TILE];
        for (int64_t c = 0; c < n0; ++c) {
            for (int64_t r = 0; r < nr; ++r) col[r] = f[r * n0 + c];
            ggml_fp32_to_fp16_row(col, (ggml_fp16_t *) dst + c * n1 + r0, nr);
        }
        return;
    }
    const E * src = (const E *) (raw + r0 * row);
    E * out = (E *) dst;
    for (int64_t c0 = 0; c0 < n0; c0 += TILE) {
        const int64_t c1 = std::min(n0, c0 + TILE);
        for (int64_t c = c0; c < c1; ++c) {
            E * o = out + c * n1 + r0;
            for (int64_t r = 0; r < nr; ++r) o[r] = src[r * n0 + c];
        }
    }
}

// The bytes of tt = Wᵀ [n1, n0] from W's bytes raw (type st, [n0, n1]):
// W's own elements for F32/F16/BF16, F16 of the dequantized values for a
// quantized W. Bands of 64 source rows (transpose_band), split over
// n_threads threads (each writes its own columns of every row of Wᵀ). The
// values are those of an element-by-element transpose.
// They are written to dst (ggml_nbytes(Wᵀ) bytes, e.g. Wᵀ's own host
// memory).
static void transpose_into(const uint8_t * raw, ggml_type st, int64_t n0, int64_t n1, int n_threads, uint8_t * dst) {
    constexpr int64_t BAND = 64;
    const bool quant = ggml_is_quantized(st);
    if (quant) {
        const auto * tr = ggml_get_type_traits(st);
        if (!tr || !tr->to_float) throw empo_error(EMPO_ERR_ARCH, std::string("cannot convert tensor type ") + ggml_type_name(st));
    }
    const size_t es = quant ? 0 : ggml_type_size(st);
    if (!quant && es != 2 && es != 4) throw empo_error(EMPO_ERR_TYPE, std::string("cannot transpose tensor type ") + ggml_type_name(st));
    const int64_t n_bands = (n1 + BAND - 1) / BAND;
    const int n_workers = (int) std::max<int64_t>(1, std::min<int64_t>(n_threads, n_bands));
    auto work = [&](int w) {
        std::vector<float> f(quant ? (size_t) (BAND * n0) : 0);
        for (int64_t b = w; b < n_bands; b += n_workers) {
            const int64_t r0 = b * BAND, nr = std::min(BAND, n1 - r0);
            if (es == 2) transpose_band<uint16_t>(raw, st, n0, n1, r0, nr, dst, f);
            else         transpose_band<uint32_t>(raw, st, n0, n1, r0, nr, dst, f);
        }
    };
    std::vector<std::thread> pool;
    for (int w = 1; w < n_workers; ++w) pool.emplace_back(work, w);
    work(0);
    for (auto & th : pool) th.join();
}

// advise_huge asks Linux for transparent huge pages over a host buffer about
// to be written for the first time (a hint: nothing changes where THP is
// off or the kernel declines). Filling gigabytes of fresh 4 KiB pages costs
// one page fault each, and in a virtual machine a fault is slow: at the
// 1.5B shape the faults were the largest share of the start's CPU time
// (docs/training.md); with 2 MiB pages there are 512× fewer.
static void advise_huge(ggml_backend_buffer_t buf) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (!buf || !ggml_backend_buffer_is_host(buf)) return;
    const uintptr_t huge = (uintptr_t) 2 << 20;
    const uintptr_t base = (uintptr_t) ggml_backend_buffer_get_base(buf);
    const uintptr_t end  = base + ggml_backend_buffer_get_size(buf);
    const uintptr_t lo = (base + huge - 1) & ~(huge - 1), hi = end & ~(huge - 1);
    if (base && hi > lo) (void) madvise((void *) lo, hi - lo, MADV_HUGEPAGE);
#else
    (void) buf;
#endif
}

// make_transposed fills each Wᵀ of pairs (W, Wᵀ) from W's bytes wherever W
// lives: read and written in place in host memory (the CPU), else W copied
// out and Wᵀ uploaded. In place, each byte of W and Wᵀ is touched once: no
// staging vectors to zero and copy again (at the 1.5B shape the staging
// and its page faults were most of the start's CPU time, the transposition
// itself 2 %; docs/training.md).
static void make_transposed(empo_model & m, const std::vector<std::pair<ggml_tensor *, ggml_tensor *>> & pairs) {
    std::vector<uint8_t> raw, tdata;
    for (const auto & d : pairs) {
        const ggml_tensor * w = d.first;
        ggml_tensor * tt = d.second;
        const uint8_t * src;
        if (w->buffer && ggml_backend_buffer_is_host(w->buffer) && w->data) {
            src = (const uint8_t *) w->data;
        } else {
            raw.resize(ggml_nbytes(w));
            ggml_backend_tensor_get(w, raw.data(), 0, raw.size());
            src = raw.data();
        }
        if (tt->buffer && ggml_backend_buffer_is_host(tt->buffer) && tt->data) {
            transpose_into(src, w->type, w->ne[0], w->ne[1], m.cfg.n_threads, (uint8_t *) tt->data);
        } else {
            tdata.resize(ggml_nbytes(tt));
            transpose_into(src, w->type, w->ne[0], w->ne[1], m.cfg.n_threads, tdata.data());
            ggml_backend_tensor_set(tt, tdata.data(), 0, tdata.size());
        }
    }
}

// the error for a tensor whose type the graph cannot train on
static empo_error type_error(const std::string & name, ggml_type type,
                             const char * why = "the training graph reads F32, F16, BF16 and quantized types with a CPU dot product") {
    return empo_error(EMPO_ERR_TYPE, "tensor " + name + " has type " + ggml_type_name(type) + ", which cannot be trained on (" + why + ")");
}

// can the training graph read a frozen matrix of this type as it is (mul_mat
// on the CPU, and a transposed copy)?
static bool usable_matrix_type(ggml_type type) {
    if (type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) return true;
    const auto * tr = ggml_get_type_traits(type);
    return ggml_is_quantized(type) && tr && tr->to_float && ggml_get_type_traits_cpu(type)->vec_dot;
}

// the LoRA pair of target k in block il: A [n_in, r], B [r, n_out], params
// with persistent gradient accumulators (created in ctx_p, placed later by
// adamw_state::init), metadata for empo_model_param_info
static void add_lora(empo_model & m, empo_linear & lin, int il, int k, const std::string & base, int64_t n_in, int64_t n_out) {
    const int r = m.cfg.lora_rank;
    lin.a = ggml_new_tensor_2d(m.ctx_p, GGML_TYPE_F32, n_in, r);
    lin.b = ggml_new_tensor_2d(m.ctx_p, GGML_TYPE_F32, r, n_out);
    ggml_set_name(lin.a, (base + ".lora_a").c_str());
    ggml_set_name(lin.b, (base + ".lora_b").c_str());
    ggml_set_param(lin.a);
    ggml_set_param(lin.b);
    m.params.push_back(lin.a);
    m.params.push_back(lin.b);
    for (ggml_tensor * t : { lin.a, lin.b }) {
        empo_param_info pi{};
        snprintf(pi.name, sizeof(pi.name), "%s", t->name);
        pi.ne[0]  = t->ne[0];
        pi.ne[1]  = t->ne[1];
        pi.layer  = il;
        pi.target = k;
        pi.is_b   = t == lin.b ? 1 : 0;
        m.param_meta.push_back(pi);
    }
}

// The name of llama.cpp's file type ft (general.file_type, enum llama_ftype)
// spelled like ggml's type names ("q4_K_M" for LLAMA_FTYPE_MOSTLY_Q4_K_M,
// "q8_0", "f16"), or nullptr for a value this llama.cpp does not know.
static const char * ftype_name(int64_t ft) {
    switch (ft) {
        case LLAMA_FTYPE_ALL_F32:         return "f32";
        case LLAMA_FTYPE_MOSTLY_F16:      return "f16";
        case LLAMA_FTYPE_MOSTLY_BF16:     return "bf16";
        case LLAMA_FTYPE_MOSTLY_Q4_0:     return "q4_0";
        case LLAMA_FTYPE_MOSTLY_Q4_1:     return "q4_1";
        case LLAMA_FTYPE_MOSTLY_Q5_0:     return "q5_0";
        case LLAMA_FTYPE_MOSTLY_Q5_1:     return "q5_1";
        case LLAMA_FTYPE_MOSTLY_Q8_0:     return "q8_0";
        case LLAMA_FTYPE_MOSTLY_Q2_K:     return "q2_K";
        case LLAMA_FTYPE_MOSTLY_Q2_K_S:   return "q2_K_S";
        case LLAMA_FTYPE_MOSTLY_Q3_K_S:   return "q3_K_S";
        case LLAMA_FTYPE_MOSTLY_Q3_K_M:   return "q3_K_M";
        case LLAMA_FTYPE_MOSTLY_Q3_K_L:   return "q3_K_L";
        case LLAMA_FTYPE_MOSTLY_Q4_K_S:   return "q4_K_S";
        case LLAMA_FTYPE_MOSTLY_Q4_K_M:   return "q4_K_M";
        case LLAMA_FTYPE_MOSTLY_Q5_K_S:   return "q5_K_S";
        case LLAMA_FTYPE_MOSTLY_Q5_K_M:   return "q5_K_M";
        case LLAMA_FTYPE_MOSTLY_Q6_K:     return "q6_K";
        case LLAMA_FTYPE_MOSTLY_TQ1_0:    return "tq1_0";
        case LLAMA_FTYPE_MOSTLY_TQ2_0:    return "tq2_0";
        case LLAMA_FTYPE_MOSTLY_IQ2_XXS:  return "iq2_xxs";
        case LLAMA_FTYPE_MOSTLY_IQ2_XS:   return "iq2_xs";
        case LLAMA_FTYPE_MOSTLY_IQ2_S:    return "iq2_s";
        case LLAMA_FTYPE_MOSTLY_IQ2_M:    return "iq2_m";
        case LLAMA_FTYPE_MOSTLY_IQ3_XS:   return "iq3_xs";
        case LLAMA_FTYPE_MOSTLY_IQ3_XXS:  return "iq3_xxs";
        case LLAMA_FTYPE_MOSTLY_IQ1_S:    return "iq1_s";
        case LLAMA_FTYPE_MOSTLY_IQ1_M:    return "iq1_m";
        case LLAMA_FTYPE_MOSTLY_IQ4_NL:   return "iq4_nl";
        case LLAMA_FTYPE_MOSTLY_IQ4_XS:   return "iq4_xs";
        case LLAMA_FTYPE_MOSTLY_IQ3_S:    return "iq3_s";
        case LLAMA_FTYPE_MOSTLY_IQ3_M:    return "iq3_m";
        case LLAMA_FTYPE_MOSTLY_MXFP4_MOE: return "mxfp4_moe";
        default: return nullptr;
    }
}

// the matrix type a file type is named after (GGML_TYPE_COUNT: not checked)
static ggml_type ftype_main_type(int64_t ft) {
    switch (ft) {
        case LLAMA_FTYPE_ALL_F32:       return GGML_TYPE_F32;
        case LLAMA_FTYPE_MOSTLY_F16:    return GGML_TYPE_F16;
        case LLAMA_FTYPE_MOSTLY_BF16:   return GGML_TYPE_BF16;
        case LLAMA_FTYPE_MOSTLY_Q4_0:   return GGML_TYPE_Q4_0;
        case LLAMA_FTYPE_MOSTLY_Q4_1:   return GGML_TYPE_Q4_1;
        case LLAMA_FTYPE_MOSTLY_Q5_0:   return GGML_TYPE_Q5_0;
        case LLAMA_FTYPE_MOSTLY_Q5_1:   return GGML_TYPE_Q5_1;
        case LLAMA_FTYPE_MOSTLY_Q8_0:   return GGML_TYPE_Q8_0;
        case LLAMA_FTYPE_MOSTLY_Q4_K_S:
        case LLAMA_FTYPE_MOSTLY_Q4_K_M: return GGML_TYPE_Q4_K;
        case LLAMA_FTYPE_MOSTLY_Q5_K_S:
        case LLAMA_FTYPE_MOSTLY_Q5_K_M: return GGML_TYPE_Q5_K;
        case LLAMA_FTYPE_MOSTLY_Q6_K:   return GGML_TYPE_Q6_K;
        default:                        return GGML_TYPE_COUNT;
    }
}

// info.wtype_name: the base's type as llama.cpp reports its file type —
// general.file_type when the file has it (file_type ≥ 0), else the most
// frequent type of its matrices, as llama.cpp guesses one — whatever the
// graph stores (F32 copies with the autograd backward): a Q4_K_M base is
// "q4_K_M", not the type of the last matrix read (its Q6_K head or FFN
// down matrices). A key that no matrix bears out (a file rewritten with
// its metadata copied: "f32" over Q8_0 matrices) is ignored for the guess.
// counts: the base's matrices by their file type.
static void set_base_type(empo_model & m, int64_t file_type, const std::map<ggml_type, int> & counts) {
    const char * name = file_type >= 0 ? ftype_name(file_type) : nullptr;
    const ggml_type main = ftype_main_type(file_type);
    if (name && main != GGML_TYPE_COUNT && !counts.count(main)) name = nullptr;
    if (!name) {
        ggml_type most = m.info.wtype >= 0 ? (ggml_type) m.info.wtype : GGML_TYPE_F32;
        int n = 0;
        for (const auto & kv : counts) {
            if (kv.second > n) { most = kv.first; n = kv.second; }
        }
        name = ggml_type_name(most);
    }
    snprintf(m.info.wtype_name, sizeof(m.info.wtype_name), "%s", name);
}

// checks shared by both loaders
static void check_hparams(const empo_model_info & hp) {
    if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_ff <= 0 || hp.n_head <= 0 || hp.n_head_kv <= 0 ||
        hp.n_ctx <= 0 || hp.n_vocab <= 0 || hp.n_embd % hp.n_head != 0 || hp.n_head % hp.n_head_kv != 0) {
        throw empo_error(EMPO_ERR_ARCH, "inconsistent qwen2 hyperparameters");
    }
    if ((hp.n_embd / hp.n_head) % 2 != 0) throw empo_error(EMPO_ERR_ARCH, "odd head dim: NeoX RoPE needs an even one");
    if (!(std::isfinite(hp.rope_base) && hp.rope_base > 0 && std::isfinite(hp.norm_eps) && hp.norm_eps > 0)) {
        throw empo_error(EMPO_ERR_ARCH, "bad rope base or norm eps");
    }
}

struct weight_loader {
    empo_model &  m;
    gguf_source & src;
    std::vector<pending_upload> uploads;
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> transposes; // (W, Wᵀ) to make once W is uploaded
    std::map<ggml_type, int> counts; // the matrices read, by their file type (set_base_type)

    // full training: tensor `id` becomes a trainable F32 parameter [n0, n1]
    // (n1 = 0: 1-D [n0]) in ctx_p, placed in the optimizer's flat buffer by
    // adamw_state::init and uploaded after it, like every other tensor. Only
    // F32 files: the trained base is written back as F32, and a silent
    // F16 → F32 conversion would double the file and change the model's type.
    ggml_tensor * param(const std::string & name, int64_t id, int64_t n0, int64_t n1) {
        const ggml_type type = src.type(id);
        if (type != GGML_TYPE_F32) {
            throw empo_error(EMPO_ERR_CONFIG, "full training needs an F32 model: tensor " + name + " is " +
                             ggml_type_name(type) + " (use an F32 GGUF, or train a LoRA adapter)");
        }
        ggml_tensor * t = n1 > 0 ? ggml_new_tensor_2d(m.ctx_p, GGML_TYPE_F32, n0, n1)  // [n0, n1]
                                 : ggml_new_tensor_1d(m.ctx_p, GGML_TYPE_F32, n0);     // [n0]
        ggml_set_name(t, name.c_str());
        ggml_set_param(t);
        m.params.push_back(t);
        std::vector<uint8_t> raw = src.read(id);
        uploads.push_back({t, std::move(raw)});
        return t;
    }

    // 1-D tensor (norm weight or bias) stored as F32 [n]
    ggml_tensor * vec(const std::string & name, int64_t n, bool required = true) {
        const int64_t id = src.find(name);
        if (id < 0) {
            if (required) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + name);
            return nullptr;
        }
        const ggml_type type = src.type(id);
        if ((int64_t) (src.size(id) / ggml_type_size(type) * ggml_blck_size(type)) != n) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + name + " has an unexpected size");
        }
        if (m.cfg.full) return param(name, id, n, 0);
        const auto * tr = ggml_get_type_traits(type);
        if (type != GGML_TYPE_F32 && !(tr && tr->to_float)) throw type_error(name, type);
        ggml_tensor * t = ggml_new_tensor_1d(m.ctx_w, GGML_TYPE_F32, n);
        ggml_set_name(t, name.c_str());
        std::vector<float> f = to_f32(src.read(id), type, n);
        std::vector<uint8_t> bytes(n * sizeof(float));
        memcpy(bytes.data(), f.data(), bytes.size());
        uploads.push_back({t, std::move(bytes)});
        return t;
    }

    // 2-D matrix [n0, n1]. Storage: F32/F16/BF16 and quantized types with a
    // CPU dot product are kept as they are (mul_mat reads them); force_f32
    // (autograd mode, whose OUT_PROD handles F32 only) converts to F32.
    // want_t adds Wᵀ [n1, n0]: same type for F32/F16/BF16, F16 for quantized
    // types (their blocks run along rows, so they cannot be transposed as is).
    ggml_tensor * mat(const std::string & name, int64_t n0, int64_t n1, bool force_f32, bool want_t) {
        const int64_t id = src.find(name);
        if (id < 0) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + name);
        const ggml_type type = src.type(id);
        const size_t want = ggml_row_size(type, n0) * n1;
        if (n0 % ggml_blck_size(type) != 0 || src.size(id) != want) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + name + " has an unexpected shape (want ne=[" +
                             std::to_string(n0) + "," + std::to_string(n1) + "])");
        }
        ++counts[type];
        if (m.cfg.full) {
            m.info.wtype = GGML_TYPE_F32;
            return param(name, id, n0, n1);
        }
        if (!usable_matrix_type(type)) throw type_error(name, type);
        const ggml_type st = force_f32 ? GGML_TYPE_F32 : type;
        ggml_tensor * t = ggml_new_tensor_2d(m.ctx_w, st, n0, n1);
        ggml_set_name(t, name.c_str());
        std::vector<uint8_t> raw = src.read(id);
        if (st != type) {
            std::vector<float> f = to_f32(raw, type, n0 * n1);
            raw.assign((const uint8_t *) f.data(), (const uint8_t *) (f.data() + f.size()));
        }
        if (want_t) {
            if (ggml_tensor * tt = new_transposed(m, t)) transposes.push_back({t, tt}); // made after the upload (make_transposed)
        }
        uploads.push_back({t, std::move(raw)});
        if (m.info.wtype < 0 || st != GGML_TYPE_F32) m.info.wtype = st;
        return t;
    }
};

// Full training: put the parameters (created by weight_loader::param in the
// loader's order) into the GGUF file's tensor order, the one documented order
// of empo_model_param_info, and fill their metadata (layer = block index or
// -1, target = -1: no LoRA). Every tensor of the file must be a parameter of
// the graph: an unknown tensor would be left untrained in the written base.
// In the default backward mode every matrix read by MUL_MAT is registered
// for rewrite_frozen_backward with no stored copy, so dX = Wᵀ·dY uses a CONT
// of transpose(W) made in the graph from the current (trained) W.
static void order_full_params(empo_model & m, const gguf_source & src) {
    std::unordered_map<std::string, ggml_tensor *> by_name;
    for (ggml_tensor * t : m.params) by_name[t->name] = t;
    std::vector<ggml_tensor *> ordered;
    const int64_t n = src.n();
    for (int64_t i = 0; i < n; ++i) {
        const std::string name = src.name(i);
        auto it = by_name.find(name);
        if (it == by_name.end()) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + name + " is not part of the qwen2 training graph: full training would leave it untrained");
        }
        ordered.push_back(it->second);
        by_name.erase(it);
    }
    if (ordered.size() != m.params.size()) throw empo_error(EMPO_ERR_INTERNAL, "full training: parameters and file tensors differ");
    m.params = ordered;
    m.param_meta.clear();
    for (ggml_tensor * t : m.params) {
        empo_param_info pi{};
        snprintf(pi.name, sizeof(pi.name), "%s", t->name);
        pi.ne[0]  = t->ne[0];
        pi.ne[1]  = t->ne[1];
        pi.layer  = -1;
        int blk = -1, len = 0;
        if (sscanf(t->name, "blk.%d.%n", &blk, &len) == 1 && len > 0) pi.layer = blk;
        pi.target = -1;
        pi.is_b   = 0;
        m.param_meta.push_back(pi);
    }
    if (!m.cfg.autograd_frozen) {
        m.transposed[m.output.w] = nullptr; // token_embd when tied
        for (const empo_layer & L : m.layers) {
            for (const empo_linear & lin : L.lin) m.transposed[lin.w] = nullptr;
        }
    }
}

void load_model(empo_model & m, const char * path) {
    gguf_source src;
    open_source(src, path);
    const gguf_context * g = src.meta();

    // ---- hyperparameters
    const int64_t kid = gguf_find_key(g, "general.architecture");
    if (kid < 0 || gguf_get_kv_type(g, kid) != GGUF_TYPE_STRING) throw empo_error(EMPO_ERR_ARCH, "GGUF has no general.architecture");
    const std::string arch = gguf_get_val_str(g, kid);
    if (arch != "qwen2") throw empo_error(EMPO_ERR_ARCH, "architecture \"" + arch + "\" is not supported (only qwen2)");

    empo_model_info & hp = m.info;
    hp.n_layer   = (int) gguf_int(g, arch + ".block_count", 0, true);
    hp.n_embd    = (int) gguf_int(g, arch + ".embedding_length", 0, true);
    hp.n_ff      = (int) gguf_int(g, arch + ".feed_forward_length", 0, true);
    hp.n_head    = (int) gguf_int(g, arch + ".attention.head_count", 0, true);
    hp.n_head_kv = (int) gguf_int(g, arch + ".attention.head_count_kv", hp.n_head, false);
    hp.n_ctx     = (int) gguf_int(g, arch + ".context_length", 0, true);
    hp.rope_base = gguf_float(g, arch + ".rope.freq_base", 10000.0f);
    hp.norm_eps  = gguf_float(g, arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
    if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_ff <= 0 || hp.n_head <= 0 || hp.n_head_kv <= 0 ||
        hp.n_ctx <= 0 || hp.n_embd % hp.n_head != 0 || hp.n_head % hp.n_head_kv != 0) {
        throw empo_error(EMPO_ERR_ARCH, "inconsistent qwen2 hyperparameters");
    }
    if ((int64_t) hp.n_layer * 9 > src.n()) { // each block has ≥ 9 tensors; also bounds every size below
        throw empo_error(EMPO_ERR_ARCH, "block_count " + std::to_string(hp.n_layer) + " does not match the tensors in the file");
    }
    hp.n_embd_head = hp.n_embd / hp.n_head;
    if (hp.n_embd_head % 2 != 0) throw empo_error(EMPO_ERR_ARCH, "odd head dim: NeoX RoPE needs an even one");
    {
        // RoPE scaling (YaRN, linear, ...) is not built into this graph: refuse
        // it rather than train a model whose positions differ from llama.cpp's
        const int64_t sid = gguf_find_key(g, (arch + ".rope.scaling.type").c_str());
        std::string scaling = "none";
        if (sid >= 0) {
            if (gguf_get_kv_type(g, sid) != GGUF_TYPE_STRING) throw empo_error(EMPO_ERR_ARCH, "rope.scaling.type is not a string");
            scaling = gguf_get_val_str(g, sid);
        }
        if (scaling != "none") throw empo_error(EMPO_ERR_ARCH, "RoPE scaling \"" + scaling + "\" is not supported");
        const float fs = gguf_float(g, arch + ".rope.scale_linear", 1.0f);
        if (fs != 1.0f && fs != 0.0f) throw empo_error(EMPO_ERR_ARCH, "linear RoPE scaling is not supported");
    }
    const int64_t key_len = gguf_int(g, arch + ".attention.key_length", hp.n_embd_head, false);
    const int64_t val_len = gguf_int(g, arch + ".attention.value_length", hp.n_embd_head, false);
    if (key_len != hp.n_embd_head || val_len != hp.n_embd_head) {
        throw empo_error(EMPO_ERR_ARCH, "head dim != n_embd/n_head is not supported");
    }
    if (!(std::isfinite(hp.rope_base) && hp.rope_base > 0 && std::isfinite(hp.norm_eps) && hp.norm_eps > 0)) {
        throw empo_error(EMPO_ERR_ARCH, "bad rope base or norm eps");
    }
    {
        const int64_t id = src.find("token_embd.weight");
        if (id < 0) throw empo_error(EMPO_ERR_ARCH, "missing tensor token_embd.weight");
        const ggml_type t = gguf_get_tensor_type(g, id);
        const size_t row = ggml_row_size(t, hp.n_embd);
        if (row == 0 || gguf_get_tensor_size(g, id) % row != 0) throw empo_error(EMPO_ERR_ARCH, "bad token_embd.weight");
        hp.n_vocab = (int) (gguf_get_tensor_size(g, id) / row);
    }
    hp.tied  = src.find("output.weight") < 0 ? 1 : 0;
    hp.wtype = -1;

    const int64_t C = hp.n_embd, F = hp.n_ff, V = hp.n_vocab;
    const int64_t Dkv = (int64_t) hp.n_embd_head * hp.n_head_kv;
    const bool    full = m.cfg.full;
    // full training has no stored transposed copies (they would go stale):
    // every matrix is read as it is, like the autograd mode
    const bool    ag  = m.cfg.autograd_frozen || full;
    const int     r   = m.cfg.lora_rank;
    m.lora_scale = m.cfg.lora_alpha != 0.0f ? m.cfg.lora_alpha / (float) r : 1.0f;
    hp.full = full ? 1 : 0;

    // ---- tensors (metadata only; data uploaded after allocation)
    const int n_tensors = 8 + hp.n_layer * (12 + EMPO_TARGET_COUNT);
    {
        ggml_init_params ip = { ggml_tensor_overhead() * (size_t) n_tensors, nullptr, true };
        m.ctx_w = ggml_init(ip);
        // LoRA: A, B and their gradients per target; full: every tensor and its gradient
        const int n_p = std::max(2 * 2 * EMPO_TARGET_COUNT * hp.n_layer + 4, 2 * n_tensors);
        ggml_init_params pp = { ggml_tensor_overhead() * (size_t) n_p, nullptr, true };
        m.ctx_p = ggml_init(pp);
        if (!m.ctx_w || !m.ctx_p) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
    }
    weight_loader wl{m, src, {}, {}};
    {
        // the token embedding: get_rows reads any type
        const bool tied_t = hp.tied && !ag;
        m.tok_embd = wl.mat("token_embd.weight", C, V, ag && hp.tied, tied_t);
        m.out_norm = wl.vec("output_norm.weight", C);
        if (hp.tied) {
            m.output.w  = m.tok_embd;
            m.output.wt = tied_t ? m.transposed[m.tok_embd] : nullptr;
        } else {
            m.output.w  = wl.mat("output.weight", C, V, ag, !ag);
            m.output.wt = ag ? nullptr : m.transposed[m.output.w];
        }
    }
    const int64_t n_in [EMPO_TARGET_COUNT] = { C, C,   C,   C, C, C, F };
    const int64_t n_out[EMPO_TARGET_COUNT] = { C, Dkv, Dkv, C, F, F, C };
    m.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        empo_layer & L = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = wl.vec(p + "attn_norm.weight", C);
        L.ffn_norm  = wl.vec(p + "ffn_norm.weight", C);
        L.bq = wl.vec(p + "attn_q.bias", C,   false);
        L.bk = wl.vec(p + "attn_k.bias", Dkv, false);
        L.bv = wl.vec(p + "attn_v.bias", Dkv, false);
        if (src.find(p + "attn_output.bias") >= 0) throw empo_error(EMPO_ERR_ARCH, "attn_output.bias is not a qwen2 tensor");
        for (int k = 0; k < EMPO_TARGET_COUNT; ++k) {
            const std::string base = p + m.target_tensor[k] + ".weight";
            empo_linear & lin = L.lin[k];
            lin.w  = wl.mat(base, n_in[k], n_out[k], ag, !ag);
            lin.wt = ag ? nullptr : m.transposed[lin.w];
            if (!full && (m.cfg.lora_targets & (1u << k))) add_lora(m, lin, il, k, base, n_in[k], n_out[k]);
        }
    }
    if (full) order_full_params(m, src);
    {
        const int64_t fid = gguf_find_key(g, "general.file_type");
        const int64_t ft  = fid >= 0 && gguf_get_kv_type(g, fid) == GGUF_TYPE_UINT32 ? (int64_t) gguf_get_val_u32(g, fid) : -1;
        set_base_type(m, ft, wl.counts);
    }
    for (ggml_tensor * t : m.params) {
        ggml_tensor * gacc = ggml_dup_tensor(m.ctx_p, t);
        ggml_format_name(gacc, "grad_acc.%s", t->name);
        m.grads.push_back(gacc);
    }
    if (m.params.empty()) throw empo_error(EMPO_ERR_CONFIG, "no LoRA targets selected");

    // ---- allocate on the backend and upload
    // buffers of the primary device (device memory for a GPU): every read and
    // write goes through ggml_backend_tensor_get/set
    ggml_backend_buffer_type_t buft = ggml_backend_get_default_buffer_type(m.backend);
    if (ggml_get_first_tensor(m.ctx_w)) { // empty in full training: every tensor is a parameter
        m.buf_w = ggml_backend_alloc_ctx_tensors_from_buft(m.ctx_w, buft);
        if (!m.buf_w) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate weight buffers");
        advise_huge(m.buf_w);
        // WEIGHTS usage: the scheduler runs ops that read these tensors on their
        // backend (ggml_backend_sched_backend_id_from_cur); without it nothing
        // would pull the graph onto the device and it would run on the CPU fallback
        ggml_backend_buffer_set_usage(m.buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    }
    // trainable params (LoRA pairs, or every tensor in full training),
    // gradient accumulators and AdamW moments: one flat buffer of the same
    // buffer type (adamw_state), zeroed, also marked WEIGHTS
    m.opt.init(m.backend, m.params, m.grads);
    for (auto & u : wl.uploads) {
        ggml_backend_tensor_set(u.t, u.data.data(), 0, u.data.size());
        std::vector<uint8_t>().swap(u.data);
    }
    make_transposed(m, wl.transposes);
}


// Build on a loaded llama.cpp model's own tensors (frozen weights once per
// process): matrices, norms and biases are llama.cpp's (whatever buffer they
// live in: the mmap of the GGUF on the CPU, device memory when offloaded);
// only the transposed copies Wᵀ (none with transpose_in_graph), the LoRA
// params, gradients and moments are allocated here.
void load_shared(empo_model & m, const empo_llama_weights & lw, int64_t file_type) {
    if (lw.arch != "qwen2") throw empo_error(EMPO_ERR_ARCH, "architecture \"" + lw.arch + "\" is not supported (only qwen2)");
    if (m.cfg.autograd_frozen) throw empo_error(EMPO_ERR_CONFIG, "the autograd backward converts weights to F32: it cannot share llama.cpp's weights");
    empo_model_info & hp = m.info;
    hp.n_layer = lw.n_layer; hp.n_embd = lw.n_embd; hp.n_ff = lw.n_ff; hp.n_head = lw.n_head; hp.n_head_kv = lw.n_head_kv;
    hp.n_ctx = lw.n_ctx_train; hp.rope_base = lw.rope_base; hp.norm_eps = lw.norm_eps; hp.n_vocab = lw.n_vocab;
    check_hparams(hp);
    hp.n_embd_head = hp.n_embd / hp.n_head;
    if (lw.rope_scaling) throw empo_error(EMPO_ERR_ARCH, "RoPE scaling is not supported");
    if (lw.n_embd_head_k != hp.n_embd_head || lw.n_embd_head_v != hp.n_embd_head) throw empo_error(EMPO_ERR_ARCH, "head dim != n_embd/n_head is not supported");
    if (lw.output_b) throw empo_error(EMPO_ERR_ARCH, "output.bias is not a qwen2 tensor");
    if ((int) lw.layers.size() != hp.n_layer) throw empo_error(EMPO_ERR_ARCH, "layer count mismatch");
    hp.tied  = lw.tied || !lw.output ? 1 : 0;
    hp.wtype = -1;
    const int64_t C = hp.n_embd, F = hp.n_ff, V = hp.n_vocab, Dkv = (int64_t) hp.n_embd_head * hp.n_head_kv;
    m.lora_scale = m.cfg.lora_alpha != 0.0f ? m.cfg.lora_alpha / (float) m.cfg.lora_rank : 1.0f;
    {
        ggml_init_params ip = { ggml_tensor_overhead() * (size_t) (8 + hp.n_layer * EMPO_TARGET_COUNT), nullptr, true };
        m.ctx_w = ggml_init(ip);
        ggml_init_params pp = { ggml_tensor_overhead() * (size_t) (2 * 2 * EMPO_TARGET_COUNT * hp.n_layer + 4), nullptr, true };
        m.ctx_p = ggml_init(pp);
        if (!m.ctx_w || !m.ctx_p) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
    }
    // (W, Wᵀ) pairs whose data is made after allocation, one matrix at a time,
    // so that no more than one matrix is ever held twice in host memory
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> deferred;
    std::map<ggml_type, int> counts; // the matrices by type (set_base_type)
    auto mat = [&](ggml_tensor * w, const std::string & what, int64_t n0, int64_t n1, bool want_t) {
        if (!w) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + what);
        ++counts[w->type];
        if (w->ne[0] != n0 || w->ne[1] != n1 || w->ne[2] != 1 || w->ne[3] != 1 || !ggml_is_contiguous(w)) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + what + " has an unexpected shape");
        }
        if (!usable_matrix_type(w->type)) throw type_error(what, w->type);
        if (want_t) {
            if (ggml_tensor * tt = new_transposed(m, w)) deferred.push_back({w, tt});
        }
        if (m.info.wtype < 0 || w->type != GGML_TYPE_F32) m.info.wtype = w->type;
        return w;
    };
    auto vec = [&](ggml_tensor * t, const std::string & what, int64_t n, bool required) -> ggml_tensor * {
        if (!t) {
            if (required) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + what);
            return nullptr;
        }
        if (t->type != GGML_TYPE_F32) throw type_error(what, t->type, "norm weights and biases are read in F32 from llama.cpp's model");
        if (ggml_nelements(t) != n) throw empo_error(EMPO_ERR_ARCH, "tensor " + what + " has an unexpected size");
        return t;
    };
    m.tok_embd = mat(lw.tok_embd, "token_embd.weight", C, V, false);
    m.out_norm = vec(lw.output_norm, "output_norm.weight", C, true);
    m.output.w  = mat(lw.output ? lw.output : lw.tok_embd, "output.weight", C, V, true);
    m.output.wt = m.transposed[m.output.w];
    const int64_t n_in [EMPO_TARGET_COUNT] = { C, C,   C,   C, C, C, F };
    const int64_t n_out[EMPO_TARGET_COUNT] = { C, Dkv, Dkv, C, F, F, C };
    m.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        const empo_llama_layer & S = lw.layers[il];
        empo_layer & L = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = vec(S.attn_norm, p + "attn_norm.weight", C, true);
        L.ffn_norm  = vec(S.ffn_norm,  p + "ffn_norm.weight",  C, true);
        L.bq = vec(S.bq, p + "attn_q.bias", C,   false);
        L.bk = vec(S.bk, p + "attn_k.bias", Dkv, false);
        L.bv = vec(S.bv, p + "attn_v.bias", Dkv, false);
        if (S.bo) throw empo_error(EMPO_ERR_ARCH, "attn_output.bias is not a qwen2 tensor");
        for (int k = 0; k < EMPO_TARGET_COUNT; ++k) {
            const std::string base = p + m.target_tensor[k] + ".weight";
            empo_linear & lin = L.lin[k];
            lin.w  = mat(S.w[k], base, n_in[k], n_out[k], true);
            lin.wt = m.transposed[lin.w];
            if (m.cfg.lora_targets & (1u << k)) add_lora(m, lin, il, k, base, n_in[k], n_out[k]);
        }
    }
    if (!lw.output || lw.output == lw.tok_embd) --counts[lw.tok_embd->type]; // tied: read twice above, once in the file
    set_base_type(m, file_type, counts);
    for (ggml_tensor * t : m.params) {
        ggml_tensor * gacc = ggml_dup_tensor(m.ctx_p, t);
        ggml_format_name(gacc, "grad_acc.%s", t->name);
        m.grads.push_back(gacc);
    }
    if (m.params.empty()) throw empo_error(EMPO_ERR_CONFIG, "no LoRA targets selected");
    if (ggml_get_first_tensor(m.ctx_w)) { // stored Wᵀ copies (none with transpose_in_graph on F32/F16)
        m.buf_w = ggml_backend_alloc_ctx_tensors_from_buft(m.ctx_w, ggml_backend_get_default_buffer_type(m.backend));
        if (!m.buf_w) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate the transposed weights");
        advise_huge(m.buf_w);
        ggml_backend_buffer_set_usage(m.buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    }
    m.opt.init(m.backend, m.params, m.grads);
    make_transposed(m, deferred); // W's bytes read from wherever llama.cpp keeps them
}

// the device whose buffers hold the shared weights (nullptr: host memory)
ggml_backend_dev_t shared_device(const empo_llama_weights & lw) {
    ggml_backend_dev_t dev = nullptr;
    auto see = [&](const ggml_tensor * t) {
        if (!t || !t->buffer) return;
        ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
        if (ggml_backend_buft_is_host(buft)) return;
        ggml_backend_dev_t d = ggml_backend_buft_get_device(buft);
        if (!d || ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_CPU) {
            // e.g. CPU_REPACK: llama.cpp re-laid the blocks of a quantized
            // matrix for its kernels; their bytes cannot be read back
            throw empo_error(EMPO_ERR_CONFIG, std::string("weight ") + t->name + " is in buffer type " +
                             ggml_backend_buft_name(buft) + ", which the training graph cannot read: use Load(path)");
        }
        if (dev && d != dev) throw empo_error(EMPO_ERR_CONFIG, "the model's weights are split across devices: not supported for training");
        dev = d;
    };
    see(lw.tok_embd);
    see(lw.output);
    for (const auto & L : lw.layers) for (ggml_tensor * w : L.w) see(w);
    return dev;
}

} // namespace empo
