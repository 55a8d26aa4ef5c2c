package cgo

/*
#cgo CXXFLAGS: -std=c++17
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/include -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/src
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

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
)

// model is the state behind *Model (one C handle).
type model struct {
	mu     sync.Mutex
	c      *C.struct_empo_model
	info   ModelInfo
	lora   LoRAConfig
	params []ParamInfo
	opts   Options
	last   int // padded tokens of the last graph
}

var targetBit = map[string]uint32{
	TargetQ: 0, TargetK: 1, TargetV: 2, TargetO: 3, TargetGate: 4, TargetUp: 5, TargetDown: 6,
}

var targetOfTensor = map[string]string{
	"attn_q": TargetQ, "attn_k": TargetK, "attn_v": TargetV, "attn_output": TargetO,
	"ffn_gate": TargetGate, "ffn_up": TargetUp, "ffn_down": TargetDown,
}

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
	if lora.Rank < 1 {
		return nil, fmt.Errorf("%w: LoRA rank %d < 1", ErrConfig, lora.Rank)
	}
	if !finite32(lora.Alpha) {
		return nil, fmt.Errorf("%w: LoRA alpha %v", ErrNonFinite, lora.Alpha)
	}
	if len(lora.Targets) == 0 {
		lora.Targets = append([]string(nil), AllTargets...)
	}
	var mask uint32
	for _, t := range lora.Targets {
		bit, ok := targetBit[t]
		if !ok {
			return nil, fmt.Errorf("%w: unknown LoRA target %q (want one of %v)", ErrConfig, t, AllTargets)
		}
		mask |= 1 << bit
	}
	p := C.empo_model_default_params()
	p.lora_rank = C.int(lora.Rank)
	p.lora_alpha = C.float(lora.Alpha)
	p.lora_targets = C.uint32_t(mask)
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p.n_threads = C.int(threads)
	switch strings.ToLower(opts.Device) {
	case "", "cpu":
		p.device = 0
	case "gpu":
		p.device = 1
	case "auto":
		p.device = 2
	default:
		return nil, fmt.Errorf("%w: device %q (want cpu, gpu or auto)", ErrConfig, opts.Device)
	}
	p.autograd_frozen = C.bool(opts.AutogradFrozenBackward)
	p.transpose_in_graph = C.bool(opts.TransposeInGraph)
	if opts.MaxTokens < 0 {
		return nil, fmt.Errorf("%w: MaxTokens %d < 0", ErrConfig, opts.MaxTokens)
	}

	if err := checkEmptyDims(path); err != nil {
		return nil, err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [512]C.char
	var h *C.struct_empo_model
	if rc := C.empo_model_init(cpath, p, &h, &errbuf[0], C.size_t(len(errbuf))); rc != C.EMPO_OK {
		return nil, statusErr(rc, path+": "+C.GoString(&errbuf[0]))
	}
	m := &model{c: h, lora: lora, opts: opts}
	var ci C.struct_empo_model_info
	C.empo_model_get_info(h, &ci)
	m.info = ModelInfo{
		Arch: "qwen2", Layers: int(ci.n_layer), Hidden: int(ci.n_embd), Heads: int(ci.n_head),
		KVHeads: int(ci.n_head_kv), HeadDim: int(ci.n_embd_head), FFN: int(ci.n_ff), Vocab: int(ci.n_vocab),
		Ctx: int(ci.n_ctx), RopeBase: float32(ci.rope_base), NormEps: float32(ci.norm_eps),
		TiedEmbeddings: ci.tied != 0, WeightType: C.GoString(&ci.wtype_name[0]),
		Backend: C.GoString(&ci.backend[0]),
	}
	n := int(C.empo_model_n_params(h))
	var name [256]C.char
	var ne [2]C.int64_t
	for i := 0; i < n; i++ {
		C.empo_model_param_info(h, C.int(i), &name[0], C.size_t(len(name)), &ne[0])
		pi := ParamInfo{Name: C.GoString(&name[0]), Shape: [2]int{int(ne[0]), int(ne[1])}}
		pi.IsB = strings.HasSuffix(pi.Name, ".lora_b")
		pi.Base = strings.TrimSuffix(strings.TrimSuffix(pi.Name, ".lora_a"), ".lora_b")
		parts := strings.Split(pi.Base, ".") // blk.<i>.<tensor>.weight
		if len(parts) == 4 {
			fmt.Sscanf(parts[1], "%d", &pi.Layer)
			pi.Target = targetOfTensor[parts[2]]
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

// checkEmptyDims refuses a GGUF with a tensor whose ne[1..3] has a zero:
// ggml's gguf_init_from_file divides by them in its overflow check and the
// process dies of SIGFPE. A file the Go reader cannot parse is left to the
// C loader, which reports it.
func checkEmptyDims(path string) error {
	f, err := gguf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	for _, ti := range f.Tensors {
		for d := 1; d < len(ti.Shape); d++ {
			if ti.Shape[d] == 0 {
				return fmt.Errorf("%w: %s: tensor %s has shape %v (an empty dimension after the first)", ErrIO, path, ti.Name, ti.Shape)
			}
		}
	}
	return nil
}

// initLoRA: A ~ U(−1/√n_in, 1/√n_in) (PEFT: kaiming_uniform_(a=√5) on the
// [r, n_in] weight has bound gain·√(3/fan_in) = √(1/3)·√(3/n_in) = 1/√n_in);
// B = 0, or U(−1/√r, 1/√r) with RandomB.
// The draws are those of `empo2 lora init` (lora.Init) with the same seed.
func initLoRA(params []ParamInfo, cfg LoRAConfig) [][]float32 {
	rng := lora.NewInitRand(uint64(cfg.Seed))
	out := make([][]float32, len(params))
	for i, p := range params {
		v := make([]float32, p.Shape[0]*p.Shape[1])
		if !p.IsB || cfg.RandomB {
			lora.FillUniform(rng, v, 1/math.Sqrt(float64(p.Shape[0]))) // n_in for A, r for B
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

func (M *Model) readAll(grad bool) [][]float32 {
	m, err := M.lock()
	if err != nil {
		return nil
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
			return nil
		}
		out[i] = v
	}
	return out
}

// ReadParams returns copies of the LoRA parameters (nil after Close).
func (M *Model) ReadParams() [][]float32 { return M.readAll(false) }

// Grads returns copies of the accumulated gradients (nil after Close).
func (M *Model) Grads() [][]float32 { return M.readAll(true) }

// WriteParams replaces the LoRA parameters; vals must match Params() in
// count and sizes and be finite.
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

// ZeroGrads clears the gradient accumulators.
func (M *Model) ZeroGrads() {
	m, err := M.lock()
	if err != nil {
		return
	}
	defer m.mu.Unlock()
	C.empo_model_grad_zero(m.c)
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
		Compute: int64(cm.compute_peak), ComputeLast: int64(cm.compute_last), PaddedTokens: m.last,
		Rewritten: int(cm.n_rewritten), Pinned: int(cm.n_pinned), Splits: int(cm.n_splits),
	}
}

// packed is a right-padded micro-batch in the C layout.
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
	return m.info.Ctx * 8
}

// pack lays out seqs; rowsFor(b) lists the token indices t ≥ 1 of sequence b
// whose log-prob is wanted.
func (m *model) pack(seqs [][]int32, rowsFor func(b int) []int) (*packed, error) {
	T := 0
	for _, s := range seqs {
		T = max(T, len(s))
	}
	if T > m.info.Ctx {
		return nil, fmt.Errorf("%w: sequence length %d exceeds the context %d", ErrShape, T, m.info.Ctx)
	}
	if T*len(seqs) > m.maxTokens() {
		return nil, fmt.Errorf("%w: %d sequences × %d tokens exceeds MaxTokens %d", ErrShape, len(seqs), T, m.maxTokens())
	}
	p := &packed{B: len(seqs), T: T, tokens: make([]int32, T*len(seqs)), pos: make([]int32, T*len(seqs))}
	V := int32(m.info.Vocab)
	for b, s := range seqs {
		for t := 0; t < T; t++ {
			p.pos[t+T*b] = int32(t)
			if t < len(s) {
				if s[t] < 0 || s[t] >= V {
					return nil, fmt.Errorf("%w: token id %d at position %d is outside the vocabulary [0, %d)", ErrShape, s[t], t, V)
				}
				p.tokens[t+T*b] = s[t]
			}
		}
		for _, t := range rowsFor(b) {
			p.rows = append(p.rows, int32(t-1+T*b))
			p.targets = append(p.targets, s[t])
		}
	}
	if int64(len(p.rows))*int64(V) >= math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d trained tokens × vocab %d exceeds 2^31 logits", ErrShape, len(p.rows), V)
	}
	return p, nil
}

// forward computes the log-probs and entropies of p's trained rows. With
// coef non-nil it is a training step: coef gets them mid-compute, fills the
// coefficients, and the backward adds the gradients into the accumulators
// (nothing is added when coef or the finiteness check fails).
func (m *model) forward(p *packed, coef coefFunc) (logp, ent []float32, err error) {
	M := len(p.rows)
	logp = make([]float32, M)
	ent = make([]float32, M)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&p.tokens[0])
	pin.Pin(&p.pos[0])
	pin.Pin(&p.rows[0])
	pin.Pin(&p.targets[0])
	b := C.struct_empo_batch{
		B: C.int32_t(p.B), T: C.int32_t(p.T),
		tokens: (*C.int32_t)(unsafe.Pointer(&p.tokens[0])), pos: (*C.int32_t)(unsafe.Pointer(&p.pos[0])),
		M: C.int32_t(M), rows: (*C.int32_t)(unsafe.Pointer(&p.rows[0])), targets: (*C.int32_t)(unsafe.Pointer(&p.targets[0])),
	}
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

// LogProbsBatch is LogProbs for several sequences, batched into as few
// graphs as the memory caps allow (a sequence is never split).
func (M *Model) LogProbsBatch(seqs [][]int32) ([][]float32, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if len(seqs) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrShape)
	}
	for i, s := range seqs {
		if len(s) < 2 {
			return nil, fmt.Errorf("%w: sequence %d has %d tokens (need ≥ 2)", ErrShape, i, len(s))
		}
	}
	// chunk so that one graph's [V, M] head buffers stay ≲ 1 GiB and the
	// padded batch within MaxTokens (a sequence is never split)
	maxRows := max(64, (1<<30)/(20*m.info.Vocab))
	out := make([][]float32, len(seqs))
	for lo := 0; lo < len(seqs); {
		hi, rows, T := lo, 0, 0
		for hi < len(seqs) {
			r, t := len(seqs[hi])-1, max(T, len(seqs[hi]))
			if hi > lo && (rows+r > maxRows || t*(hi-lo+1) > m.maxTokens()) {
				break
			}
			rows, T = rows+r, t
			hi++
		}
		group := seqs[lo:hi]
		p, err := m.pack(group, func(b int) []int {
			r := make([]int, 0, len(group[b])-1)
			for t := 1; t < len(group[b]); t++ {
				r = append(r, t)
			}
			return r
		})
		if err != nil {
			return nil, err
		}
		logp, _, err := m.forward(p, nil)
		if err != nil {
			return nil, err
		}
		j := 0
		for b, s := range group {
			o := make([]float32, len(s))
			for t := 1; t < len(s); t++ {
				o[t] = logp[j]
				j++
			}
			out[lo+b] = o
		}
		lo = hi
	}
	return out, nil
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
// (1/Tokens for token-mean, 1/Sequences for seq-mean-token-mean).
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

func (m *model) objective(batch []Sequence, obj Objective, lossScale float32, withBackward bool) (Stats, error) {
	var st Stats
	var err error
	if obj, err = validateObjective(obj); err != nil {
		return st, err
	}
	if !finite32(lossScale) || lossScale < 0 {
		return st, fmt.Errorf("%w: loss scale %v (must be finite and ≥ 0)", ErrNonFinite, lossScale)
	}
	if len(batch) == 0 {
		return st, fmt.Errorf("%w: empty batch", ErrShape)
	}
	for i := range batch {
		if err := validateSequence(i, &batch[i], obj, m.info.Vocab); err != nil {
			return st, err
		}
	}
	// ---- EMPO² low-probability masking, per sequence
	var kept []int
	var nTok []int
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
		kept = append(kept, i)
		nTok = append(nTok, n)
		st.Tokens += n
	}
	st.Sequences = len(kept)
	if st.Tokens == 0 {
		return st, nil
	}
	seqs := make([][]int32, len(kept))
	for k, i := range kept {
		seqs[k] = batch[i].Tokens
	}
	p, err := m.pack(seqs, func(b int) []int {
		s := &batch[kept[b]]
		var r []int
		for t := 1; t < len(s.Tokens); t++ {
			if s.Trained[t] {
				r = append(r, t)
			}
		}
		return r
	})
	if err != nil {
		return st, err
	}
	st.PaddedTokens = p.B * p.T
	// ---- objective in float64; coefficients for the backward surrogate.
	// For a training step this runs inside the graph compute (coefficient
	// callback), between the forward and the backward nodes.
	objFn := func(logp, ent, cLogp, cEnt []float32) error {
		scale := float64(lossScale)
		if scale == 0 {
			if obj.Aggregation == AggTokenMean {
				scale = 1 / float64(st.Tokens)
			} else {
				scale = 1 / float64(st.Sequences)
			}
		}
		j := 0
		var nClip, nDual int
		for k, i := range kept {
			s := &batch[i]
			w := scale
			if obj.Aggregation == AggSeqMeanTokenMean {
				w = scale / float64(nTok[k])
			}
			for t := 1; t < len(s.Tokens); t++ {
				if !s.Trained[t] {
					continue
				}
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
		n := float64(st.Tokens)
		st.PolicyLoss /= n
		st.ApproxKL /= n
		st.ApproxKLK1 /= n
		st.RefKL /= n
		st.Entropy /= n
		st.LogpMean /= n
		st.ClipFrac = float64(nClip) / n
		st.DualClipFrac = float64(nDual) / n
		return nil
	}
	if withBackward {
		if _, _, err := m.forward(p, objFn); err != nil {
			return st, err
		}
		return st, nil
	}
	logp, ent, err := m.forward(p, nil)
	if err != nil {
		return st, err
	}
	if err := objFn(logp, ent, make([]float32, len(logp)), make([]float32, len(logp))); err != nil {
		return st, err
	}
	return st, nil
}
