package cgo

/*
#cgo CXXFLAGS: -std=c++17
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/include -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/src
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/llama/llama.cpp/include -I${SRCDIR}/../third_party/ollama/llama/llama.cpp/src
#include <stdlib.h>
#include "empo_train.h"
extern int empoGoCoef(void *, int32_t, float *, float *, float *, float *);
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"

	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src"

	"github.com/empo2/empo2/llama"
	loraPkg "github.com/empo2/empo2/lora"
)

// model is the state behind *Model (one C handle).
type model struct {
	mu     sync.Mutex
	c      *C.struct_empo_model
	info   ModelInfo
	lora   LoRAConfig
	params []ParamInfo
	opts   Options
	last   int    // padded tokens of the last graph
	shared func() // releases the llama.Model whose weights the graph uses (LoadShared)
	full   bool   // LoadFull: every tensor is a parameter, no LoRA
	path   string // the GGUF file loaded (SaveFull copies its metadata)
}

// targetNames are the C strings of loraPkg.Targets' tensor names, handed to
// the C side (which defines no names of its own); allocated once.
var targetNames = func() []*C.char {
	if len(loraPkg.Targets) != int(C.EMPO_TARGET_COUNT) {
		panic("cgo: loraPkg.Targets and enum empo_target disagree")
	}
	out := make([]*C.char, len(loraPkg.Targets))
	for i, t := range loraPkg.Targets {
		out[i] = C.CString(t.Tensor)
	}
	return out
}()

func statusErr(code C.int, what string) error {
	var base error
	switch code {
	case C.EMPO_OK:
		return nil
	case C.EMPO_ERR_IO:
		base = ErrIO
	case C.EMPO_ERR_ARCH:
		base = ErrUnsupportedArch
	case C.EMPO_ERR_SHAPE:
		base = ErrShape
	case C.EMPO_ERR_CONFIG:
		base = ErrConfig
	case C.EMPO_ERR_NONFINITE:
		base = ErrNonFinite
	case C.EMPO_ERR_TOO_LARGE:
		base = ErrComputeCap
	case C.EMPO_ERR_TYPE:
		base = ErrTensorType
	default:
		base = ErrBackend
	}
	return fmt.Errorf("%w: %s", base, what)
}

// Load reads a Qwen2 GGUF, keeps its weights frozen on the chosen backend
// (F32, F16, BF16 and quantized matrices stay in their type; norms and
// biases become F32; AutogradFrozenBackward converts everything to F32)
// with a transposed copy of each matrix for the backward (same type, F16 for
// quantized types; none with TransposeInGraph), and creates the LoRA
// parameters: A Kaiming-uniform (PEFT's kaiming_uniform_(a=√5), i.e.
// U(−1/√n_in, 1/√n_in)) from lora.Seed, B zero (unless lora.RandomB).
func Load(path string, lora LoRAConfig, opts Options) (*Model, error) {
	return load(path, nil, lora, opts, false)
}

// LoadShared builds the training graph on the weights of a model already
// loaded by llama.cpp (the rollout side), so the frozen base exists once per
// process: the graph reads llama.cpp's own tensors (the mmap of the GGUF on
// the CPU, or the device copy when llama.cpp offloaded the layers; the
// training backend is then that device). Only the transposed copies (none
// with TransposeInGraph), the LoRA parameters,
// gradients and AdamW moments are allocated. lm must be a Qwen2 model; it
// stays loaded until the returned Model is closed (even if lm.Close is
// called first). Options.Device is ignored; AutogradFrozenBackward is
// refused (it needs F32 copies of the weights). Log-probs equal Load's on
// the same file.
func LoadShared(lm *llama.Model, lora LoRAConfig, opts Options) (*Model, error) {
	if lm == nil {
		return nil, fmt.Errorf("%w: nil llama model", ErrConfig)
	}
	return load("", lm, lora, opts, false)
}

// SharedTransposedBytes is what LoadShared(lm, …) would allocate for the
// stored transposed copies Wᵀ without Options.TransposeInGraph
// (MemoryStats.Transposed of that load: the head and the seven matrices of
// every block, F16 for quantized types), computed from the tensors' shapes
// and types without allocating, so that a caller can choose
// TransposeInGraph from the memory it has before loading.
func SharedTransposedBytes(lm *llama.Model) (int64, error) {
	if lm == nil {
		return 0, fmt.Errorf("%w: nil llama model", ErrConfig)
	}
	ptr, rel, err := lm.Share()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	defer rel()
	var errbuf [512]C.char
	var n C.int64_t
	if rc := C.empo_model_shared_transposed_bytes((*C.struct_llama_model)(ptr), &n, &errbuf[0], C.size_t(len(errbuf))); rc != C.EMPO_OK {
		return 0, statusErr(rc, lm.Path()+": "+C.GoString(&errbuf[0]))
	}
	return int64(n), nil
}

func load(path string, lm *llama.Model, lora LoRAConfig, opts Options, full bool) (*Model, error) {
	var mask uint32
	if !full {
		if lora.Rank < 1 {
			return nil, fmt.Errorf("%w: LoRA rank %d < 1", ErrConfig, lora.Rank)
		}
		if !finite32(lora.Alpha) {
			return nil, fmt.Errorf("%w: LoRA alpha %v", ErrNonFinite, lora.Alpha)
		}
		if len(lora.Targets) == 0 {
			lora.Targets = append([]string(nil), AllTargets...)
		}
		for _, t := range lora.Targets {
			bit := loraPkg.TargetIndex(t)
			if bit < 0 {
				return nil, fmt.Errorf("%w: unknown LoRA target %q (want one of %v)", ErrConfig, t, AllTargets)
			}
			mask |= 1 << bit
		}
	}
	p := C.empo_model_default_params()
	for k, name := range targetNames {
		p.target_tensor[k] = name
	}
	if !full { // full: the C defaults for rank and alpha, which it ignores
		p.lora_rank = C.int(lora.Rank)
		p.lora_alpha = C.float(lora.Alpha)
	}
	p.lora_targets = C.uint32_t(mask)
	p.full = C.bool(full)
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p.n_threads = C.int(threads)
	dev, err := deviceCode(opts.Device)
	if err != nil {
		return nil, err
	}
	p.device = C.int(dev)
	p.autograd_frozen = C.bool(opts.AutogradFrozenBackward)
	p.transpose_in_graph = C.bool(opts.TransposeInGraph)
	if opts.MaxTokens < 0 {
		return nil, fmt.Errorf("%w: MaxTokens %d < 0", ErrConfig, opts.MaxTokens)
	}
	p.max_compute = C.int64_t(opts.MaxComputeBytes)
	if opts.ComputeRefTokens < 0 || opts.ComputeRefTokens > math.MaxInt32 {
		return nil, fmt.Errorf("%w: ComputeRefTokens %d", ErrConfig, opts.ComputeRefTokens)
	}
	p.compute_ref_tokens = C.int32_t(opts.ComputeRefTokens)
	p.compute_budget = C.int64_t(opts.ComputeBudgetBytes)
	if opts.KeepComputeBytes != 0 {
		p.keep_compute = C.int64_t(opts.KeepComputeBytes)
	}
	p.attn_block = C.int64_t(opts.AttentionBlockBytes)

	var errbuf [512]C.char
	var h *C.struct_empo_model
	var release func()
	if lm != nil {
		if opts.AutogradFrozenBackward {
			return nil, fmt.Errorf("%w: AutogradFrozenBackward needs F32 copies of the weights; it cannot share llama.cpp's", ErrConfig)
		}
		ptr, rel, err := lm.Share()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrClosed, err)
		}
		if rc := C.empo_model_init_shared((*C.struct_llama_model)(ptr), p, &h, &errbuf[0], C.size_t(len(errbuf))); rc != C.EMPO_OK {
			rel()
			return nil, statusErr(rc, lm.Path()+": "+C.GoString(&errbuf[0]))
		}
		release = rel
	} else {
		// the GGUF checks every C loader of this module runs first (an
		// empty dimension would crash ggml's reader with SIGFPE)
		if err := llama.CheckGGUF(path); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrIO, err)
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		if rc := C.empo_model_init(cpath, p, &h, &errbuf[0], C.size_t(len(errbuf))); rc != C.EMPO_OK {
			return nil, statusErr(rc, path+": "+C.GoString(&errbuf[0]))
		}
	}
	m := &model{c: h, lora: lora, opts: opts, shared: release, full: full, path: path}
	var ci C.struct_empo_model_info
	C.empo_model_get_info(h, &ci)
	m.info = ModelInfo{
		ModelInfo: llama.ModelInfo{Arch: "qwen2", NLayer: int(ci.n_layer), NEmbd: int(ci.n_embd), NHead: int(ci.n_head),
			NHeadKV: int(ci.n_head_kv), NVocab: int(ci.n_vocab), NCtxTrain: int(ci.n_ctx)},
		HeadDim: int(ci.n_embd_head), FFN: int(ci.n_ff), RopeBase: float32(ci.rope_base), NormEps: float32(ci.norm_eps),
		TiedEmbeddings: ci.tied != 0, WeightType: C.GoString(&ci.wtype_name[0]),
		Backend: C.GoString(&ci.backend[0]),
	}
	n := int(C.empo_model_n_params(h))
	if full {
		if err := m.fullParams(n); err != nil {
			(&Model{m: m}).Close()
			return nil, err
		}
		M := &Model{m: m}
		runtime.SetFinalizer(M, func(x *Model) { _ = x.Close() })
		return M, nil
	}
	for i := 0; i < n; i++ {
		var ci C.struct_empo_param_info
		if rc := C.empo_model_param_info(h, C.int(i), &ci); rc != C.EMPO_OK {
			(&Model{m: m}).Close()
			return nil, statusErr(rc, fmt.Sprintf("%s: parameter %d metadata", path, i))
		}
		pi := ParamInfo{Name: C.GoString(&ci.name[0]), Shape: [2]int{int(ci.ne[0]), int(ci.ne[1])},
			Layer: int(ci.layer), IsB: ci.is_b != 0}
		if k := int(ci.target); k >= 0 && k < len(loraPkg.Targets) {
			pi.Target = loraPkg.Targets[k].Short
		}
		pi.Base = loraPkg.BaseName(pi.Layer, pi.Target)
		if want := pi.Base + map[bool]string{false: loraPkg.SuffixA, true: loraPkg.SuffixB}[pi.IsB]; pi.Target == "" || want != pi.Name {
			(&Model{m: m}).Close()
			return nil, fmt.Errorf("%w: parameter %d: C reports %q (layer %d, target %d), expected %q", ErrBackend, i, pi.Name, pi.Layer, int(ci.target), want)
		}
		if i > 0 && !lessParam(m.params[i-1], pi) {
			(&Model{m: m}).Close()
			return nil, fmt.Errorf("%w: parameter %s after %s breaks the canonical order", ErrBackend, pi.Name, m.params[i-1].Name)
		}
		m.params = append(m.params, pi)
	}
	M := &Model{m: m}
	runtime.SetFinalizer(M, func(x *Model) { _ = x.Close() })
	if err := M.WriteParams(initLoRA(m.params, lora)); err != nil {
		M.Close()
		return nil, err
	}
	return M, nil
}

// deviceCode maps Options.Device to empo_model_params.device.
func deviceCode(d string) (int, error) {
	switch strings.ToLower(d) {
	case "", "cpu":
		return 0, nil
	case "gpu":
		return 1, nil
	case "auto":
		return 2, nil
	}
	return 0, fmt.Errorf("%w: device %q (want cpu, gpu or auto)", ErrConfig, d)
}

// initLoRA: A ~ U(−1/√n_in, 1/√n_in) (PEFT: kaiming_uniform_(a=√5) on the
// [r, n_in] weight has bound gain·√(3/fan_in) = √(1/3)·√(3/n_in) = 1/√n_in);
// B = 0, or U(−1/√r, 1/√r) with RandomB.
// The draws are those of `empo2 lora init` (lora.Init) with the same seed.
func initLoRA(params []ParamInfo, cfg LoRAConfig) [][]float32 {
	rng := loraPkg.NewInitRand(uint64(cfg.Seed))
	out := make([][]float32, len(params))
	for i, p := range params {
		v := make([]float32, p.Shape[0]*p.Shape[1])
		if !p.IsB || cfg.RandomB {
			loraPkg.FillUniform(rng, v, 1/math.Sqrt(float64(p.Shape[0]))) // n_in for A, r for B
		}
		out[i] = v
	}
	return out
}

func (M *Model) lock() (*model, error) {
	if M == nil || M.m == nil {
		return nil, ErrClosed
	}
	m := M.m
	m.mu.Lock()
	if m.c == nil {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	return m, nil
}

// Close frees the ggml buffers. Idempotent; safe on a nil *Model.
func (M *Model) Close() error {
	if M == nil || M.m == nil {
		return nil
	}
	m := M.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c != nil {
		C.empo_model_free(m.c)
		m.c = nil
		if m.shared != nil {
			m.shared()
			m.shared = nil
		}
	}
	runtime.SetFinalizer(M, nil)
	return nil
}

// Info returns the hyperparameters read from the GGUF.
func (M *Model) Info() ModelInfo {
	if M == nil || M.m == nil {
		return ModelInfo{}
	}
	return M.m.info
}

// LoRA returns the adapter configuration (Targets filled in).
func (M *Model) LoRA() LoRAConfig {
	if M == nil || M.m == nil {
		return LoRAConfig{}
	}
	l := M.m.lora
	l.Targets = append([]string(nil), l.Targets...)
	return l
}

// LoRAScale is the factor applied to B·A·x: Alpha/Rank (1 when Alpha is 0).
func (M *Model) LoRAScale() float32 {
	l := M.LoRA()
	if l.Alpha == 0 {
		return 1
	}
	return l.Alpha / float32(l.Rank)
}

// Params describes the trainable tensors in the order of every [][]float32.
func (M *Model) Params() []ParamInfo {
	if M == nil || M.m == nil {
		return nil
	}
	return append([]ParamInfo(nil), M.m.params...)
}

// lessParam is the canonical order of parameter tensors (lora.Less on the
// base names, A before B): the C side must produce it.
func lessParam(a, b ParamInfo) bool {
	if a.Base == b.Base {
		return !a.IsB && b.IsB
	}
	return loraPkg.Less(a.Base, b.Base)
}

func (M *Model) readAll(grad bool) ([][]float32, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([][]float32, len(m.params))
	for i, p := range m.params {
		v := make([]float32, p.Shape[0]*p.Shape[1])
		var rc C.int
		if grad {
			rc = C.empo_model_grad_get(m.c, C.int(i), (*C.float)(unsafe.Pointer(&v[0])), C.int64_t(len(v)))
		} else {
			rc = C.empo_model_param_get(m.c, C.int(i), (*C.float)(unsafe.Pointer(&v[0])), C.int64_t(len(v)))
		}
		if rc != C.EMPO_OK {
			return nil, statusErr(rc, p.Name+": "+C.GoString(C.empo_model_last_error(m.c)))
		}
		out[i] = v
	}
	return out, nil
}

// ReadParams returns copies of the trainable parameters, in Params() order
// (ErrClosed after Close; a backend failure is returned, never swallowed).
func (M *Model) ReadParams() ([][]float32, error) { return M.readAll(false) }

// Grads returns copies of the accumulated gradients, in Params() order.
func (M *Model) Grads() ([][]float32, error) { return M.readAll(true) }

// ReadAdapter returns the LoRA parameters as a llama.cpp adapter (a copy;
// its Params() equal M.Params()).
func (M *Model) ReadAdapter() (*loraPkg.Adapter, error) {
	if M.Full() {
		return nil, fmt.Errorf("%w: a full-training model has no LoRA adapter (SaveFull writes its weights)", ErrConfig)
	}
	vals, err := M.ReadParams()
	if err != nil {
		return nil, err
	}
	return loraPkg.FromParams(M.Info().Arch, M.LoRA().Alpha, M.Params(), vals)
}

// WriteAdapter replaces the LoRA parameters with a's, which must have
// exactly the model's tensors (same targets, rank and base shapes) and its
// alpha.
func (M *Model) WriteAdapter(a *loraPkg.Adapter) error {
	if a == nil {
		return fmt.Errorf("%w: nil adapter", ErrConfig)
	}
	if M.Full() {
		return fmt.Errorf("%w: a full-training model has no LoRA adapter", ErrConfig)
	}
	if alpha := M.LoRA().Alpha; a.Alpha != alpha {
		return fmt.Errorf("%w: adapter alpha %v, model %v", ErrConfig, a.Alpha, alpha)
	}
	if err := loraPkg.SameLayout(a.Params(), M.Params()); err != nil {
		return fmt.Errorf("%w: %w", ErrShape, err)
	}
	return M.WriteParams(a.Tensors())
}

// WriteParams replaces the trainable parameters (LoRA, or every weight of
// a LoadFull model); vals must match Params() in count and sizes and be
// finite.
func (M *Model) WriteParams(vals [][]float32) error {
	m, err := M.lock()
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	if len(vals) != len(m.params) {
		return fmt.Errorf("%w: %d param tensors, want %d", ErrShape, len(vals), len(m.params))
	}
	for i, p := range m.params {
		if len(vals[i]) != p.Shape[0]*p.Shape[1] {
			return fmt.Errorf("%w: %s has %d values, want %d", ErrShape, p.Name, len(vals[i]), p.Shape[0]*p.Shape[1])
		}
		for _, x := range vals[i] {
			if !finite32(x) {
				return fmt.Errorf("%w: %s contains %v", ErrNonFinite, p.Name, x)
			}
		}
	}
	for i := range m.params {
		if rc := C.empo_model_param_set(m.c, C.int(i), (*C.float)(unsafe.Pointer(&vals[i][0])), C.int64_t(len(vals[i]))); rc != C.EMPO_OK {
			return statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
		}
	}
	return nil
}

// call runs one status-returning C function on the model under its lock.
func (M *Model) call(fn func(*C.struct_empo_model) C.int) error {
	m, err := M.lock()
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	if rc := fn(m.c); rc != C.EMPO_OK {
		return statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
	}
	return nil
}

// ZeroGrads clears the gradient accumulators.
func (M *Model) ZeroGrads() error {
	return M.call(func(c *C.struct_empo_model) C.int { return C.empo_model_grad_zero(c) })
}

// MemoryBytes reports ggml buffer sizes.
func (M *Model) MemoryBytes() MemoryStats {
	m, err := M.lock()
	if err != nil {
		return MemoryStats{}
	}
	defer m.mu.Unlock()
	var cm C.struct_empo_model_mem
	C.empo_model_get_mem(m.c, &cm)
	return MemoryStats{
		Weights: int64(cm.weights), Transposed: int64(cm.transposed), Params: int64(cm.params),
		Compute: int64(cm.compute_peak), ComputeLast: int64(cm.compute_last), ComputeAlloc: int64(cm.compute_alloc),
		ComputeCap: int64(cm.compute_cap), Frozen: int64(cm.frozen), PaddedTokens: m.last,
		Rewritten: int(cm.n_rewritten), RewrittenLoRA: int(cm.n_rewritten_op), Pinned: int(cm.n_pinned), Splits: int(cm.n_splits),
		AttnChunks: int(cm.attn_chunks), AttnRecomputed: int(cm.attn_recomputed),
	}
}

// ResetComputePeak sets MemoryStats.Compute to 0, so that the next reading
// is the peak of the calls in between (e.g. one update).
func (M *Model) ResetComputePeak() error {
	return M.call(func(c *C.struct_empo_model) C.int { return C.empo_model_mem_reset_peak(c) })
}

// packed is a right-padded graph batch in the C layout.
type packed struct {
	B, T    int
	tokens  []int32 // [T*B], slot t + T*b
	pos     []int32
	rows    []int32 // [M]
	targets []int32 // [M]
}

func (m *model) maxTokens() int {
	if m.opts.MaxTokens > 0 {
		return m.opts.MaxTokens
	}
	return m.info.NCtxTrain * 8
}

// forward computes the log-probs and entropies of p's rows. With coef
// non-nil it is a training step: coef gets them mid-compute, fills the
// coefficients, and the backward adds the gradients into the accumulators
// (nothing is added when coef or the finiteness check fails).
func (m *model) forward(p *packed, coef coefFunc) (logp, ent []float32, err error) {
	M := len(p.rows)
	logp = make([]float32, M)
	ent = make([]float32, M)
	var pin runtime.Pinner
	defer pin.Unpin()
	b := p.cBatch(&pin)
	clp, cen := (*C.float)(unsafe.Pointer(&logp[0])), (*C.float)(unsafe.Pointer(&ent[0]))
	nonFinite := func(lp, en []float32) error {
		for j := range lp {
			if !finite32(lp[j]) || !finite32(en[j]) {
				return fmt.Errorf("%w: the forward pass produced log-prob %v / entropy %v", ErrNonFinite, lp[j], en[j])
			}
		}
		return nil
	}
	var rc C.int
	var call *coefCall
	if coef == nil {
		rc = C.empo_model_forward(m.c, &b, clp, cen)
	} else {
		call = &coefCall{fn: func(lp, en, cl, ce []float32) error {
			if err := nonFinite(lp, en); err != nil {
				return err
			}
			return coef(lp, en, cl, ce)
		}}
		h := cgo.NewHandle(call)
		defer h.Delete()
		pin.Pin(&h)
		rc = C.empo_model_train(m.c, &b, C.empo_coef_fn(C.empoGoCoef), unsafe.Pointer(&h), clp, cen)
	}
	runtime.KeepAlive(p)
	m.last = p.B * p.T
	if call != nil && call.err != nil {
		return nil, nil, call.err
	}
	if rc != C.EMPO_OK {
		return nil, nil, statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
	}
	if err := nonFinite(logp, ent); err != nil {
		return nil, nil, err
	}
	return logp, ent, nil
}

// LogProbs returns out[t] = log π(tokens[t] | tokens[:t]) for t ≥ 1 and
// out[0] = 0 (forward only; gradients untouched).
func (M *Model) LogProbs(tokens []int32) ([]float32, error) {
	out, err := M.LogProbsBatch([][]int32{tokens})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// LogProbsBatch is LogProbs for several sequences: LogProbsAt with every
// position t ≥ 1 wanted.
func (M *Model) LogProbsBatch(seqs [][]int32) ([][]float32, error) {
	for i, s := range seqs {
		if len(s) < 2 {
			return nil, fmt.Errorf("%w: sequence %d has %d tokens (need ≥ 2)", ErrShape, i, len(s))
		}
	}
	return M.LogProbsAt(seqs, nil)
}

// LogProbsAt returns out[i][t] = log π(seqs[i][t] | seqs[i][:t]) at every
// position t where want[i][t] is set, 0 elsewhere (forward only; gradients
// untouched). want[i] has len(seqs[i]) entries with want[i][0] false (the
// first token has no prediction); want == nil or want[i] == nil means every
// t ≥ 1. Only the wanted rows are projected to the vocabulary, so a long
// prompt whose response alone is wanted (π_old of a behaviour sequence)
// costs its tokens through the blocks and its response rows × V in the
// head. The work is batched into as few graphs as the caps allow (see
// Options.MaxComputeBytes); the values do not depend on how it is split
// beyond float rounding.
func (M *Model) LogProbsAt(seqs [][]int32, want [][]bool) ([][]float32, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if len(seqs) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrShape)
	}
	if want != nil && len(want) != len(seqs) {
		return nil, fmt.Errorf("%w: %d want masks for %d sequences", ErrShape, len(want), len(seqs))
	}
	rows := make([][]int, len(seqs))
	for i, s := range seqs {
		var w []bool
		if want != nil {
			w = want[i]
		}
		if w != nil {
			if len(w) != len(s) {
				return nil, fmt.Errorf("%w: sequence %d: want mask of %d for %d tokens", ErrShape, i, len(w), len(s))
			}
			if len(w) > 0 && w[0] {
				return nil, fmt.Errorf("%w: sequence %d: want[0] is set but the first token has no prediction", ErrShape, i)
			}
		}
		for t := 1; t < len(s); t++ {
			if w == nil || w[t] {
				rows[i] = append(rows[i], t)
			}
		}
	}
	parts, err := m.plan(seqs, rows, false)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = make([]float32, len(s))
	}
	err = m.forwardParts(seqs, rows, parts, func(seq, t int, lp float32) { out[seq][t] = lp })
	return out, err
}

// forwardParts computes the forward graphs of a plan and hands every
// log-prob to put (sequence index, position, value).
func (m *model) forwardParts(seqs [][]int32, rows [][]int, parts [][]span, put func(seq, t int, lp float32)) error {
	for _, part := range parts {
		p, err := m.packSpans(seqs, rows, part)
		if err != nil {
			return err
		}
		logp, _, err := m.forward(p, nil)
		if err != nil {
			return err
		}
		j := 0
		for _, sp := range part {
			for _, t := range rows[sp.seq][sp.lo:sp.hi] {
				put(sp.seq, t, logp[j])
				j++
			}
		}
	}
	return nil
}

// logpSlack tolerates log-probs a rounding error above 0 (p ≈ 1 computed as
// logit − logsumexp); anything larger is not a log-probability.
const logpSlack = 1e-3

func validateSequence(i int, s *Sequence, obj Objective, V int) error {
	L := len(s.Tokens)
	if L < 2 {
		return fmt.Errorf("%w: sequence %d has %d tokens (need ≥ 2)", ErrShape, i, L)
	}
	if len(s.Trained) != L || len(s.OldLogp) != L || len(s.Advantage) != L {
		return fmt.Errorf("%w: sequence %d: Trained/OldLogp/Advantage lengths %d/%d/%d, want %d",
			ErrShape, i, len(s.Trained), len(s.OldLogp), len(s.Advantage), L)
	}
	if s.RefLogp != nil && len(s.RefLogp) != L {
		return fmt.Errorf("%w: sequence %d: RefLogp length %d, want %d", ErrShape, i, len(s.RefLogp), L)
	}
	if obj.KLCoef != 0 && s.RefLogp == nil {
		return fmt.Errorf("%w: sequence %d: KLCoef is set but RefLogp is nil", ErrShape, i)
	}
	if s.Trained[0] {
		return fmt.Errorf("%w: sequence %d: Trained[0] is set but the first token has no prediction", ErrShape, i)
	}
	for t, tok := range s.Tokens {
		if tok < 0 || int(tok) >= V {
			return fmt.Errorf("%w: sequence %d: token id %d at %d is outside the vocabulary [0, %d)", ErrShape, i, tok, t, V)
		}
	}
	for t := 1; t < L; t++ {
		if !s.Trained[t] {
			continue
		}
		if !finite32(s.OldLogp[t]) || s.OldLogp[t] > logpSlack {
			return fmt.Errorf("%w: sequence %d: OldLogp[%d] = %v (must be finite and ≤ 0)", ErrNonFinite, i, t, s.OldLogp[t])
		}
		if !finite32(s.Advantage[t]) {
			return fmt.Errorf("%w: sequence %d: Advantage[%d] = %v", ErrNonFinite, i, t, s.Advantage[t])
		}
		if s.RefLogp != nil && obj.KLCoef != 0 && (!finite32(s.RefLogp[t]) || s.RefLogp[t] > logpSlack) {
			return fmt.Errorf("%w: sequence %d: RefLogp[%d] = %v", ErrNonFinite, i, t, s.RefLogp[t])
		}
	}
	return nil
}

// ForwardBackward evaluates the clipped policy-gradient objective on batch
// and adds lossScale·∂L/∂θ into the gradient accumulators (see Objective and
// docs/training.md). lossScale 0 means the batch is the whole mini-batch
// (1/Tokens for token-mean, 1/Sequences for seq-mean-token-mean). When the
// batch's training graph exceeds the compute cap it is split over several
// graphs (see LogProbsAt); the objective is a sum over tokens with fixed
// weights, so the accumulated gradient is the same up to float rounding,
// and a failure in any graph leaves the accumulators as they were.
func (M *Model) ForwardBackward(batch []Sequence, obj Objective, lossScale float32) (Stats, error) {
	m, err := M.lock()
	if err != nil {
		return Stats{}, err
	}
	defer m.mu.Unlock()
	return m.objective(batch, obj, lossScale, true)
}

// Evaluate is ForwardBackward without the backward pass: the same Stats
// (loss value, clip fractions, KL, entropy) and no change to the gradients.
func (M *Model) Evaluate(batch []Sequence, obj Objective, lossScale float32) (Stats, error) {
	m, err := M.lock()
	if err != nil {
		return Stats{}, err
	}
	defer m.mu.Unlock()
	return m.objective(batch, obj, lossScale, false)
}

// objPlan is a batch laid out for the objective exactly as ForwardBackward
// and Evaluate do: sequences dropped by low-probability masking or with no
// trained token are left out.
type objPlan struct {
	kept  []int     // batch index of each kept sequence
	nTok  []int     // its trained tokens
	seqs  [][]int32 // its tokens
	rows  [][]int   // its trained positions
	parts [][]span  // graphs over (kept index, rows), planned with the training graph
}

// planObjective validates batch and plans its graphs. st holds the masking
// counts, Tokens and Sequences; pl.parts is empty when no trained token
// survives.
func (m *model) planObjective(batch []Sequence, obj Objective) (pl objPlan, st Stats, err error) {
	if len(batch) == 0 {
		return pl, st, fmt.Errorf("%w: empty batch", ErrShape)
	}
	for i := range batch {
		if err := validateSequence(i, &batch[i], obj, m.info.NVocab); err != nil {
			return pl, st, err
		}
	}
	// ---- EMPO² low-probability masking, per sequence
	for i := range batch {
		n, keep := seqKept(&batch[i], obj)
		if n == 0 {
			continue
		}
		if !keep {
			st.MaskedSequences++
			st.MaskedTokens += n
			continue
		}
		s := &batch[i]
		var r []int
		for t := 1; t < len(s.Tokens); t++ {
			if s.Trained[t] {
				r = append(r, t)
			}
		}
		pl.kept = append(pl.kept, i)
		pl.nTok = append(pl.nTok, n)
		pl.seqs = append(pl.seqs, s.Tokens)
		pl.rows = append(pl.rows, r)
		st.Tokens += n
	}
	st.Sequences = len(pl.kept)
	if st.Tokens == 0 {
		return pl, st, nil
	}
	pl.parts, err = m.plan(pl.seqs, pl.rows, true)
	return pl, st, err
}

// TrainedLogProbs is the forward pass of ForwardBackward(batch, obj, ·)
// without the objective: out[i][t] = log π(Tokens[t] | Tokens[:t]) at every
// trained position t of sequence i that the objective keeps (0 elsewhere;
// out[i] is nil for a sequence left out by masking or with no trained
// token). The graphs (sequences, cut lengths, padding, rows) are the ones
// ForwardBackward builds for the same batch, so the values are bit-identical
// to the log-probs ForwardBackward computes with the same parameters: π_old
// recomputed this way gives ratios of exactly 1 before the first update.
func (M *Model) TrainedLogProbs(batch []Sequence, obj Objective) ([][]float32, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if obj, err = validateObjective(obj); err != nil {
		return nil, err
	}
	pl, st, err := m.planObjective(batch, obj)
	out := make([][]float32, len(batch))
	if err != nil || st.Tokens == 0 {
		return out, err
	}
	for _, i := range pl.kept {
		out[i] = make([]float32, len(batch[i].Tokens))
	}
	err = m.forwardParts(pl.seqs, pl.rows, pl.parts, func(k, t int, lp float32) { out[pl.kept[k]][t] = lp })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// testFailGraph, set by tests only, makes the objective fail in graph k of
// a call when it returns an error (to exercise the multi-graph restore).
var testFailGraph func(k int) error

func (m *model) objective(batch []Sequence, obj Objective, lossScale float32, withBackward bool) (st Stats, err error) {
	if obj, err = validateObjective(obj); err != nil {
		return st, err
	}
	if !finite32(lossScale) || lossScale < 0 {
		return st, fmt.Errorf("%w: loss scale %v (must be finite and ≥ 0)", ErrNonFinite, lossScale)
	}
	pl, st, err := m.planObjective(batch, obj)
	if err != nil || st.Tokens == 0 {
		return st, err
	}
	scale := float64(lossScale)
	if scale == 0 {
		if obj.Aggregation == AggTokenMean {
			scale = 1 / float64(st.Tokens)
		} else {
			scale = 1 / float64(st.Sequences)
		}
	}
	// ---- objective in float64; coefficients for the backward surrogate.
	// For a training step this runs inside the graph compute (coefficient
	// callback), between the forward and the backward nodes, once per graph
	// of the plan.
	var nClip, nDual int
	coefs := func(k int, part []span) coefFunc {
		return func(logp, ent, cLogp, cEnt []float32) error {
			if testFailGraph != nil {
				if err := testFailGraph(k); err != nil {
					return err
				}
			}
			j := 0
			for _, sp := range part {
				s := &batch[pl.kept[sp.seq]]
				w := scale
				if obj.Aggregation == AggSeqMeanTokenMean {
					w = scale / float64(pl.nTok[sp.seq])
				}
				for _, t := range pl.rows[sp.seq][sp.lo:sp.hi] {
					var ref float64
					if s.RefLogp != nil {
						ref = float64(s.RefLogp[t])
					}
					tt := tokenObjective(obj, float64(logp[j]), float64(s.OldLogp[t]), float64(s.Advantage[t]), ref, s.RefLogp != nil, float64(ent[j]))
					st.Loss += w * tt.loss
					st.PolicyLoss += tt.pg
					st.ApproxKL += tt.k3
					st.ApproxKLK1 += tt.k1
					st.RefKL += tt.refKL
					st.Entropy += tt.entropy
					st.LogpMean += tt.logp
					if tt.clipped {
						nClip++
					}
					if tt.dualClip {
						nDual++
					}
					cLogp[j] = float32(w * tt.dLogp)
					cEnt[j] = float32(w * tt.dEnt)
					j++
				}
			}
			return nil
		}
	}
	if withBackward && len(pl.parts) > 1 {
		// several graphs: a failure in a later one must undo the earlier ones
		if rc := C.empo_model_grad_save(m.c); rc != C.EMPO_OK {
			return st, statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
		}
		defer func() {
			if err != nil {
				if rc := C.empo_model_grad_restore(m.c); rc != C.EMPO_OK {
					err = fmt.Errorf("%w (and restoring the gradients failed: %w)", err, statusErr(rc, C.GoString(C.empo_model_last_error(m.c))))
				}
			}
		}()
	}
	var cm C.struct_empo_model_mem
	for k, part := range pl.parts {
		p, err := m.packSpans(pl.seqs, pl.rows, part)
		if err != nil {
			return st, err
		}
		st.PaddedTokens += p.B * p.T
		if withBackward {
			if _, _, err := m.forward(p, coefs(k, part)); err != nil {
				return st, err
			}
		} else {
			logp, ent, err := m.forward(p, nil)
			if err != nil {
				return st, err
			}
			if err := coefs(k, part)(logp, ent, make([]float32, len(logp)), make([]float32, len(logp))); err != nil {
				return st, err
			}
		}
		C.empo_model_get_mem(m.c, &cm)
		st.ComputeBytes = max(st.ComputeBytes, int64(cm.compute_last))
		st.Graphs++
	}
	n := float64(st.Tokens)
	st.PolicyLoss /= n
	st.ApproxKL /= n
	st.ApproxKLK1 /= n
	st.RefKL /= n
	st.Entropy /= n
	st.LogpMean /= n
	st.ClipFrac = float64(nClip) / n
	st.DualClipFrac = float64(nDual) / n
	return st, nil
}
