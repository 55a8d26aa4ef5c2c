package cgo

import (
	"errors"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
)

// Sentinel errors. Every error returned by this package wraps one of them
// (test with errors.Is).
var (
	// ErrUnsupportedArch: the GGUF is not a Qwen2-family model
	// (general.architecture != "qwen2") or has a tensor layout we do not handle.
	ErrUnsupportedArch = errors.New("cgo: unsupported model architecture")
	// ErrShape: a slice has the wrong length, a token id is out of range, a
	// batch is empty or too long, or a parameter buffer has the wrong size.
	ErrShape = errors.New("cgo: shape mismatch")
	// ErrNonFinite: an input (old log-prob, advantage, reference log-prob,
	// parameter value, loss scale) is NaN or ±Inf.
	ErrNonFinite = errors.New("cgo: non-finite value")
	// ErrConfig: an invalid LoRAConfig, Options or Objective.
	ErrConfig = errors.New("cgo: invalid configuration")
	// ErrIO: the model file cannot be opened or read.
	ErrIO = errors.New("cgo: model file")
	// ErrBackend: ggml failed (backend init, allocation, compute).
	ErrBackend = errors.New("cgo: ggml backend failure")
	// ErrClosed: the Model was closed.
	ErrClosed = errors.New("cgo: model is closed")
	// ErrComputeCap: one log-prob row of one sequence alone needs a graph
	// whose compute buffer exceeds Options.MaxComputeBytes (larger batches
	// are split, never refused; the message names the sizes).
	ErrComputeCap = errors.New("cgo: compute buffer above the cap")
	// ErrTensorType: a tensor of the model has a type the training graph
	// cannot read (the message names the tensor and its type). Matrices
	// train in F32, F16, BF16 and every quantized type with a CPU dot
	// product (Q8_0, Q4_0, Q4_K, Q6_K, ...; quantized ones get F16 Wᵀ
	// copies for the backward); norms and biases in any type that converts
	// to F32.
	ErrTensorType = errors.New("cgo: tensor type cannot be trained on")
)

// LoRA target short names and the GGUF tensor each one adapts
// (blk.<i>.<tensor>.weight). Defined once, in package lora (lora.Targets).
const (
	TargetQ    = lora.TargetQ    // attn_q
	TargetK    = lora.TargetK    // attn_k
	TargetV    = lora.TargetV    // attn_v
	TargetO    = lora.TargetO    // attn_output
	TargetGate = lora.TargetGate // ffn_gate
	TargetUp   = lora.TargetUp   // ffn_up
	TargetDown = lora.TargetDown // ffn_down
)

// AllTargets is the default LoRA target set, in canonical order
// (lora.DefaultTargets).
var AllTargets = append([]string(nil), lora.DefaultTargets...)

// LoRAConfig selects the trainable low-rank adapters.
//
// For a frozen linear y = W·x (W: ggml ne=[n_in, n_out]) the adapted layer is
// y = W·x + (Alpha/Rank)·B·(A·x), exactly as llama.cpp applies an adapter
// (llama-graph.cpp build_lora_mm, scale = alpha/rank when alpha != 0).
type LoRAConfig struct {
	Rank    int      // r ≥ 1
	Alpha   float32  // scale = Alpha/Rank; 0 means scale 1 (llama.cpp convention)
	Targets []string // subset of AllTargets; nil or empty = AllTargets
	Seed    int64    // seeds A's Kaiming-uniform init (and B's when RandomB)
	// RandomB initialises B like A (U(-1/sqrt(r), 1/sqrt(r))) instead of zero.
	// For tests only: a fresh adapter must start as the identity (B = 0).
	RandomB bool
}

// DefaultLoRAConfig: rank 8, alpha 16, all targets, seed 0, B = 0.
func DefaultLoRAConfig() LoRAConfig {
	return LoRAConfig{Rank: 8, Alpha: 16, Targets: append([]string(nil), AllTargets...), Seed: 0}
}

// Options control execution.
type Options struct {
	// Threads for the CPU backend; ≤ 0 means runtime.NumCPU().
	Threads int
	// Device: "cpu" (default), "gpu" (first GPU backend that ggml can load;
	// error if none), "auto" (GPU if one is available, else CPU). Graphs run
	// through ggml_backend_sched over [device, CPU]: the CPU backend runs
	// ops the device lacks; weights and LoRA tensors live on the device.
	Device string
	// MaxTokens caps the padded tokens (batch × longest sequence) of one
	// graph; 0 means the model's context length × 8. A call with more is
	// split over several graphs (a single sequence longer than the cap is
	// refused with ErrShape).
	MaxTokens int
	// MaxComputeBytes caps the compute buffer of one graph (activations,
	// attention matrices, the [V, rows] head tensors and, for a training
	// step, the backward's), measured by ggml's allocator on the graph
	// before anything is allocated. A call whose graph would be larger is
	// split: sequences over several graphs, then the rows of one sequence
	// (each graph with the sequence cut after its last row); one row that
	// does not fit alone is refused with ErrComputeCap. 0 means the default:
	// the larger of 256 MiB + the bytes of the model's weights
	// (MemoryStats.Frozen) and the training graph of one sequence of
	// min(context, 2048) tokens, or ComputeRefTokens (at long contexts the
	// L·H·T² attention matrices, not the weights, dominate); < 0 means no
	// cap. MemoryStats.ComputeCap is the value in force.
	MaxComputeBytes int64
	// ComputeRefTokens is the sequence length whose training graph the
	// default cap fits (0: min(context, 2048); at most the context): a
	// caller that trains on longer sequences says so, or the default cap
	// refuses them.
	ComputeRefTokens int
	// ComputeBudgetBytes > 0 with MaxComputeBytes 0: the default cap is at
	// most this (the memory the caller has left for compute, e.g. the
	// memory available minus the weights); ≤ 0: not used.
	ComputeBudgetBytes int64
	// KeepComputeBytes: compute buffers larger than this are freed at the
	// end of every call instead of staying resident until the next (0: the
	// default, 64 MiB; < 0: never freed).
	KeepComputeBytes int64
	// AutogradFrozenBackward disables the transposed-weight backward: dX
	// through frozen linears then uses ggml autograd's OUT_PROD (≈9× slower on
	// CPU; F16/BF16/quantized weights are converted to F32 at load because the
	// CPU OUT_PROD aborts on them). For measurement and cross-checking only.
	AutogradFrozenBackward bool
	// TransposeInGraph: do not keep transposed copies of the frozen
	// matrices (which double weight memory: SharedTransposedBytes); each
	// training graph makes Wᵀ with a copy just before its use and frees it
	// after — for a quantized matrix, its rows dequantized to F32 and copied
	// transposed into F16, the values of the stored copy. Saves the copies'
	// memory at the cost of one memory-bound copy per matrix and graph, and
	// a transient of 2 (F16/BF16), 4 (F32) or 6 (quantized) bytes per
	// element of the largest matrix in the compute buffer.
	TransposeInGraph bool
	// AttentionBlockBytes bounds the attention's memory: a layer whose score
	// block softmax(Kᵀ·Q), [T, T, H·B] floats, is larger computes its
	// attention in query chunks whose blocks fit, and a training graph
	// whose layers' blocks together exceed it recomputes each softmax in
	// the backward instead of keeping it from the forward. The values are
	// unchanged (the same sums); the compute buffer's attention share drops
	// from L·T²·H·B floats to a few blocks, at the cost of one more Kᵀ·Q and
	// softmax per layer in the backward. 0: 32 MiB; < 0: off (every
	// layer's full block kept, as before).
	AttentionBlockBytes int64
	// LossScaling of the LoRA backward: 0 (the default) on where a frozen
	// matrix is not F32 — F16, BF16 and quantized bases, whose backward
	// rounds dY to F16 in dX = Wᵀ·dY and would underflow at real batch
	// sizes —, 1 on, −1 off (for measurement). The backward of each graph
	// runs on the objective times a power of two that brings its largest
	// per-token coefficient to 2^8, and each gradient contribution is
	// divided by it in F32 before it is accumulated, so gradients are those
	// of the unscaled objective (exactly so on F32 bases). A graph whose
	// scaled gradient overflows is recomputed at a 2^8 lower scale
	// (Stats.LossScaleSkips). Not with LoadFull or AutogradFrozenBackward
	// (no F16 rounding there; 1 is refused). See docs/training.md, "Numerics".
	LossScaling int
}

// DefaultOptions: CPU, all cores, transposed-weight backward on.
func DefaultOptions() Options { return Options{Device: "cpu"} }

// ModelInfo is llama.ModelInfo (the one description of a model's
// hyperparameters: Arch, NLayer, NEmbd = C, NHead = H, NHeadKV = Hkv,
// NVocab = V, NCtxTrain, …) plus what the training graph needs besides.
// Name, Desc, NParams and SizeBytes are left empty (Load and LoadShared
// describe a model identically; llama.Model.Info has them).
type ModelInfo struct {
	llama.ModelInfo
	HeadDim        int // D = C/H
	FFN            int
	RopeBase       float32
	NormEps        float32
	TiedEmbeddings bool   // no output.weight: logits use token_embd.weight
	WeightType     string // the base's type as llama.cpp names its file type (general.file_type: "f32", "f16", "q8_0", "q4_K_M", ...; else its most frequent matrix type)
	Backend        string // ggml backend name
}

// ParamInfo describes one trainable tensor, in the order used by every
// [][]float32 exchanged with the Model. It is lora.ParamInfo: the order is
// the canonical one (lora.Less; block, then q,k,v,o,gate,up,down, A before
// B), the same as lora.Adapter.Params, so parameters, gradients, moments
// and adapters line up index by index with no permutation. Layer and Target
// are reported by the C side. For a model made by LoadFull the parameters
// are every tensor of the GGUF file, in the file's order: Name = Base = the
// tensor name, Shape its ne ([n, 1] for vectors), Layer the block or −1,
// Target "" and IsB false (no LoRA metadata).
type ParamInfo = lora.ParamInfo

// Sequence is one sample of a micro-batch. All per-token slices are aligned
// with Tokens: index t describes token Tokens[t], predicted from Tokens[:t].
type Sequence struct {
	Tokens  []int32
	Trained []bool // trained action/response tokens; Trained[0] must be false
	// OldLogp[t]: log-prob of Tokens[t] under the behaviour policy (read only
	// where Trained[t]).
	OldLogp []float32
	// Advantage[t] (read only where Trained[t]). EMPO² uses GRPO advantages
	// (Shao et al. 2024, "DeepSeekMath", §4.1.2): the episode reward
	// normalised within its group of rollouts, (R − mean)/std, given to
	// every token of every step of the episode; they are computed by the
	// caller, not here.
	Advantage []float32
	// RefLogp[t]: log-prob under the frozen reference (for the k3 KL
	// penalty); nil when KLCoef == 0.
	RefLogp []float32
}

// Aggregation is how per-token losses are reduced to the loss.
type Aggregation string

// Aggregation modes of Objective.Aggregation.
const (
	AggTokenMean        Aggregation = "token-mean"          // Σ_tokens ℓ · scale, scale defaults to 1/#tokens
	AggSeqMeanTokenMean Aggregation = "seq-mean-token-mean" // Σ_seq (1/|seq|) Σ_t ℓ · scale, scale defaults to 1/#seqs
)

// Valid reports whether a is a known mode (the empty default aside).
func (a Aggregation) Valid() bool { return a == AggTokenMean || a == AggSeqMeanTokenMean }

// Objective configures the policy-gradient loss (see docs/training.md): the
// per-token policy loss the caller gives (Policy: EMPO²'s clipped /
// dual-clip surrogate is algo.PPO), optional KL and entropy terms, and the
// aggregation. Every trained token of every sequence enters the loss:
// masking is the caller's.
type Objective struct {
	Policy      PolicyLoss  // per-token policy loss and its ∂/∂logp; required unless NLL
	KLCoef      float32     // β of the k3 KL to the reference (needs RefLogp); 0 = off
	EntropyCoef float32     // entropy bonus coefficient; 0 = off
	Aggregation Aggregation // AggTokenMean (default when empty) or AggSeqMeanTokenMean
	// NLL replaces the policy-gradient loss by plain negative log-likelihood
	// (supervised fine-tuning, `empo2 sft`): ℓ = −logp per trained token,
	// ∂ℓ/∂logp = −1; OldLogp and Advantage are ignored (no ratio, no clip).
	// The KL and entropy terms still apply when their coefficients are set.
	NLL bool
}

// DefaultObjective: EMPO²'s surrogate (algo.DefaultPPO: ε 0.2/0.3,
// dual-clip 10), no KL, no entropy, token-mean.
func DefaultObjective() Objective {
	return Objective{Policy: algo.DefaultPPO(), Aggregation: AggTokenMean}
}

// Stats reports one ForwardBackward call. Means are over the trained tokens
// that entered the loss (Tokens); all are computed in float64 from the
// graph's per-token log-probs.
type Stats struct {
	// Loss is the value whose gradient was accumulated: the true clipped
	// objective (+β·KL − coef·H) aggregated and multiplied by the loss scale.
	Loss         float64
	PolicyLoss   float64 // token-mean of the clipped surrogate (unscaled)
	ClipFrac     float64 // fraction of tokens where the ε clip is active
	DualClipFrac float64 // fraction of tokens where the dual clip is active
	ApproxKL     float64 // k3 estimate of KL(π_old‖π): mean((r−1) − log r)
	ApproxKLK1   float64 // k1 estimate: mean(logp_old − logp)
	RefKL        float64 // mean k3 KL to the reference (0 when KLCoef == 0)
	Entropy      float64 // mean per-token entropy of π (nats), always computed
	LogpMean     float64 // mean current log-prob of trained tokens
	Tokens       int     // trained tokens in the loss
	Sequences    int     // sequences in the loss
	PaddedTokens int     // Σ over the call's graphs of batch × longest sequence
	Graphs       int     // graphs computed (> 1 when the compute cap or MaxTokens split the batch)
	ComputeBytes int64   // largest compute buffer among the call's graphs (bytes)
	// LossScaleSkips: graphs recomputed at a lower loss scale after an
	// overflow of the scaled backward (Options.LossScaling)
	LossScaleSkips int
}

// CountTrained returns how many trained tokens and sequences (with at least
// one trained token) of batch enter the loss. A trainer that splits a
// mini-batch into micro-batches passes lossScale = 1/tokens (token-mean) or
// 1/seqs (seq-mean-token-mean) of the whole mini-batch to every
// ForwardBackward call, so the accumulated gradient is that of the
// mini-batch mean.
func CountTrained(batch []Sequence) (tokens, seqs int) {
	for i := range batch {
		if n := trainedCount(&batch[i]); n > 0 {
			tokens += n
			seqs++
		}
	}
	return tokens, seqs
}

// Model is a frozen Qwen2 policy with trainable LoRA parameters and their
// gradient accumulators, living in ggml backend buffers — or, made by
// LoadFull, a Qwen2 model all of whose weights are trainable (full.go).
// Methods may be called from several goroutines; they are serialised by an
// internal mutex.
//
// Methods (implemented in model.go, optim.go and full.go):
//
//	Load(path string, lora LoRAConfig, opts Options) (*Model, error)
//	LoadShared(lm *llama.Model, lora LoRAConfig, opts Options) (*Model, error)
//	LoadFull(path string, opts Options) (*Model, error) // every weight trainable, F32 only
//	(*Model).Full() bool
//	(*Model).SaveFull(path string, meta map[string]string) error // LoadFull: the weights as a new base GGUF
//	(*Model).Info() ModelInfo
//	(*Model).LoRA() LoRAConfig
//	(*Model).Params() []ParamInfo
//	(*Model).ReadParams() ([][]float32, error) // copies
//	(*Model).WriteParams([][]float32) error    // same layout as ReadParams
//	(*Model).ReadAdapter() (*lora.Adapter, error)
//	(*Model).WriteAdapter(*lora.Adapter) error
//	(*Model).Grads() ([][]float32, error)      // copies of the accumulated gradients
//	(*Model).ZeroGrads() error
//	(*Model).AdamWStep(AdamWParams) (gradNorm float64, clipped bool, err error) // optim.go
//	(*Model).Moments() (m, v [][]float32, err error)
//	(*Model).SetMoments(m, v [][]float32) error
//	(*Model).ProfileStep(batch []Sequence, obj Objective, lossScale float32) ([]OpTime, Stats, error)
//	(*Model).ProfileForward(seqs [][]int32) ([]OpTime, error)
//	(*Model).ForwardBackward(batch []Sequence, obj Objective, lossScale float32) (Stats, error)
//	(*Model).Evaluate(batch []Sequence, obj Objective, lossScale float32) (Stats, error) // no backward
//	(*Model).LogProbs(tokens []int32) ([]float32, error)
//	(*Model).LogProbsBatch(seqs [][]int32) ([][]float32, error)
//	(*Model).LogProbsAt(seqs [][]int32, want [][]bool) ([][]float32, error) // response-only
//	(*Model).MemoryBytes() MemoryStats
//	(*Model).ResetComputePeak() error
//	(*Model).LoRAScale() float32
//	(*Model).Close() error
//
// ForwardBackward adds d(lossScale·L)/dθ into the gradient accumulators
// (they add until ZeroGrads); lossScale 0 means "this call is the whole
// mini-batch" (1/Tokens or 1/Sequences). LogProbs returns, for every index
// t ≥ 1, log π(tokens[t] | tokens[:t]); element 0 is 0.
type Model struct {
	m *model
}

// MemoryStats are ggml buffer sizes in bytes.
type MemoryStats struct {
	Weights      int64 // frozen weights allocated by this engine (incl. transposed copies; only those with LoadShared)
	Transposed   int64 // part of Weights used by the transposed copies
	Params       int64 // LoRA params (LoadFull: every weight) + gradient accumulators + AdamW moments (one flat buffer)
	Compute      int64 // largest compute buffer a graph needed since Load or ResetComputePeak
	ComputeLast  int64 // compute buffer the last graph needed
	ComputeAlloc int64 // compute buffer held now (large ones are freed after each call: Options.KeepComputeBytes)
	ComputeCap   int64 // Options.MaxComputeBytes in force (< 0: none)
	Frozen       int64 // the model's tensors the graph reads (llama.cpp's with LoadShared; LoadFull: the trainable weights), no Wᵀ, no LoRA
	PaddedTokens int   // tokens of the last graph (batch × T)
	// Rewritten: OUT_PROD(W, dYᵀ) nodes of the last training graph computed
	// as MUL_MAT(Wᵀ, dY) instead (0 with AutogradFrozenBackward).
	Rewritten int
	// RewrittenLoRA: the other 2-D OUT_PROD nodes of the last training graph
	// (LoRA gradients dA, dB and dX through the LoRA halves) computed as
	// MUL_MAT of transposed operands (0 with AutogradFrozenBackward).
	RewrittenLoRA int
	// Pinned: RMS_NORM_BACK / SOFT_MAX_BACK operands protected from ggml-alloc's
	// in-place reuse in the last training graph (see docs/training.md).
	Pinned int
	// Splits: ggml_backend_sched splits of the last graph; 1 when one
	// backend computed all of it (always on the CPU), more when ops fell
	// back from the device to the CPU.
	Splits int
	// AttnChunks: query chunks per layer of the last graph (1: the whole
	// [T, T, H·B] score block at once; see Options.AttentionBlockBytes).
	AttnChunks int
	// AttnRecomputed: attention softmaxes recomputed in the last training
	// graph's backward instead of kept from the forward.
	AttnRecomputed int
	// LossScaling: the backward is loss-scaled (Options.LossScaling
	// resolved); LossScaleLog2: log2 of the scale of the last training
	// graph; LossScaleSkips: training graphs recomputed at a lower scale
	// after an overflow since Load.
	LossScaling    bool
	LossScaleLog2  int
	LossScaleSkips int64
}
