package cgo

/*
#cgo CXXFLAGS: -std=c++17
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/include -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/src
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/llama/llama.cpp/include -I${SRCDIR}/../third_party/ollama/llama/llama.cpp/src
#include <stdlib.h>
#include "empo_train.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
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
	if opts.LossScaling < -1 || opts.LossScaling > 1 {
		return nil, fmt.Errorf("%w: LossScaling %d (want -1, 0 or 1)", ErrConfig, opts.LossScaling)
	}
	p.loss_scaling = C.int32_t(opts.LossScaling)

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
