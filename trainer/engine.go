package trainer

import (
	"errors"
	"fmt"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/internal/sysmem"
	"github.com/empo2/empo2/llama"
)

// EnginePlan is how train fits the training engine into the memory it has
// (update.transpose, update.max_compute_mib), decided before the engine
// loads on llama.cpp's weights (cgo.LoadShared) and reported by
// RunOptions.OnEngine.
//
// With A the memory available at start (sysmem: MemAvailable, or a memory
// cgroup's room if smaller), W the base model's bytes (llama.cpp's, read by
// the rollouts and the training graph alike: one copy), R the rollouts'
// share (their KV cache plus a fixed 1 GiB for llama.cpp's compute buffer,
// the LoRA state, the tokenizer and the Go heap) and S what stored Wᵀ
// copies would take (cgo.SharedTransposedBytes): update.transpose auto stores
// the copies when S ≤ (A − W − R)/2, so that at least as much stays for the
// compute buffers, else makes Wᵀ in each graph (at 7B, S is another 14 GB
// for an F16 or a quantized base). update.max_compute_mib 0 caps one graph's
// compute buffer at the engine's default (cgo.Options.MaxComputeBytes) but
// at most A − W − R − S (never below 256 MiB): a batch that would need more
// is split over several graphs, and one that cannot be split is refused with
// cgo.ErrComputeCap rather than taking the machine's memory.
type EnginePlan struct {
	Available  sysmem.Memory // at start; Bytes 0: unknown (no memory-based choice)
	Weights    int64         // W
	Rollouts   int64         // R
	Stored     int64         // S
	InGraph    bool          // Wᵀ made in each graph (no stored copies)
	Budget     int64         // cgo.Options.ComputeBudgetBytes (0: none)
	MaxCompute int64         // cgo.Options.MaxComputeBytes (0: the engine's default)
	Reason     string        // why InGraph and Budget are what they are
}

// Fixed parts of the plan.
const (
	rolloutReserve   = int64(1) << 30   // R beside the KV cache
	minComputeBudget = int64(256) << 20 // the smallest automatic budget
)

// planEngine decides the plan for the model lm, the run's configuration and
// the memory mem available at start (mem.Bytes 0: unknown).
func planEngine(cfg Config, lm *llama.Model, mem sysmem.Memory) (EnginePlan, error) {
	info := lm.Info()
	p := EnginePlan{Available: mem, Weights: int64(info.SizeBytes)}
	stored, err := cgo.SharedTransposedBytes(lm)
	if err != nil {
		return p, err
	}
	p.Stored = stored
	if cfg.Device != "cpu" { // the weights and buffers are in device memory, which sysmem does not measure
		mem = sysmem.Memory{}
		p.Available = mem
	}
	// the rollout contexts' KV cache (F32 K and V per layer, KV heads × head dim)
	if info.NHead > 0 {
		kvPerTok := int64(2*4*info.NLayer*info.NHeadKV) * int64(info.NEmbd/info.NHead)
		p.Rollouts = kvPerTok*int64(cfg.Context)*int64(cfg.Batch.Tasks*cfg.Batch.Rollouts) + rolloutReserve
	}
	room := mem.Bytes - p.Weights - p.Rollouts // what is left for Wᵀ and compute (A − W − R)
	switch cfg.Update.Transpose {
	case TransposeStored:
		p.Reason = "update.transpose stored"
	case TransposeInGraph:
		p.InGraph, p.Reason = true, "update.transpose in-graph"
	default:
		switch {
		case mem.Bytes <= 0:
			p.Reason = "update.transpose auto, memory unknown: stored Wᵀ"
		case 2*p.Stored <= room:
			p.Reason = fmt.Sprintf("update.transpose auto: stored Wᵀ (%s) ≤ half of the %s left after the base model (%s) and the rollouts (%s)",
				gib(p.Stored), gib(room), gib(p.Weights), gib(p.Rollouts))
		default:
			p.InGraph = true
			p.Reason = fmt.Sprintf("update.transpose auto: Wᵀ made in each graph, stored copies (%s) would take more than half of the %s left after the base model (%s) and the rollouts (%s)",
				gib(p.Stored), gib(room), gib(p.Weights), gib(p.Rollouts))
		}
	}
	switch m := cfg.Update.MaxComputeMiB; {
	case m < 0:
		p.MaxCompute = -1
		p.Reason += "; compute not capped (update.max_compute_mib -1)"
	case m > 0:
		p.MaxCompute = m << 20
		p.Reason += fmt.Sprintf("; compute cap %s (update.max_compute_mib)", gib(p.MaxCompute))
	case mem.Bytes > 0:
		left := room
		if !p.InGraph {
			left -= p.Stored
		}
		p.Budget = max(left, minComputeBudget)
		p.Reason += fmt.Sprintf("; compute cap ≤ %s (%s available: %s)", gib(p.Budget), gib(mem.Bytes), mem.Source)
		if left < minComputeBudget {
			p.Reason += fmt.Sprintf("; WARNING: the base model and the rollouts leave %s of it (use a quantized base, a shorter context, or free memory)", gib(left))
		}
	}
	return p, nil
}

// Options are the engine options of the plan.
func (p EnginePlan) Options(threads int, device string) cgo.Options {
	return cgo.Options{Threads: threads, Device: device, TransposeInGraph: p.InGraph,
		MaxComputeBytes: p.MaxCompute, ComputeBudgetBytes: p.Budget}
}

// explain adds the plan to a compute-cap error (which names only the
// engine's option).
func (p EnginePlan) explain(err error) error {
	if errors.Is(err, cgo.ErrComputeCap) {
		return fmt.Errorf("%w (train: %s; set update.max_compute_mib, shorten the context or the prompts, or free memory)", err, p.Reason)
	}
	return err
}

// gib formats bytes as GiB with two decimals.
func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
