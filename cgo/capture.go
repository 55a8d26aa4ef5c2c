package cgo

/*
#include "empo_train.h"
#include "ggml.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// NodeOutput is one node of a graph computed by Model.Capture with Nodes set.
type NodeOutput struct {
	Index    int      `json:"index"` // position in the computed graph
	Name     string   `json:"name,omitempty"`
	Op       string   `json:"op"`
	Type     string   `json:"type"`
	Shape    [4]int64 `json:"shape"`
	Backend  string   `json:"backend"`        // the backend that computed it
	Srcs     []string `json:"srcs,omitempty"` // the first sources' names ("" unnamed; "BACKEND#name#0": the scheduler's copy)
	NSrc     int      `json:"n_src"`
	Backward bool     `json:"backward,omitempty"` // after the last forward node
	// Data is the output (F32 and F16 outputs that are contiguous; nil for
	// views, other types and past CaptureConfig.MaxBytes).
	Data []float32 `json:"-"`
}

// CaptureConfig configures Model.Capture.
type CaptureConfig struct {
	// Coef, when set, makes the graph a training step: it gets the
	// forward's log-probs and entropies (one per row) and fills cLogp and
	// cEnt (zeroed) with ∂L/∂logp and ∂L/∂H; the backward adds the gradient
	// of Σ cLogp·logp + cEnt·H into the accumulators (see ForwardBackward).
	// nil: a forward graph.
	Coef func(logp, ent, cLogp, cEnt []float32) error
	// Nodes computes the graph one node at a time and keeps every node's
	// output; false computes it in one go, as every other call does.
	Nodes bool
	// MaxBytes bounds the values kept (0: 1 GiB); later nodes come without Data.
	MaxBytes int64
}

// Capture is what Model.Capture returns.
type Capture struct {
	Logp, Ent []float32 // per row: every position t ≥ 1 of every sequence, in order
	Nodes     []NodeOutput
}

// Capture computes one graph over seqs — the log-probs and entropies at every
// position t ≥ 1 (LogProbsBatch's rows), all in this one graph, never split
// (ErrComputeCap when it exceeds the cap) — optionally as a training step
// (cfg.Coef) and optionally node by node, keeping every node's output
// (cfg.Nodes): a diagnosis of where two engines, or the two ways of
// computing, part. The graph depends only on the model's shapes, the
// options and seqs, so two engines loaded alike compute the same nodes in
// the same order.
func (M *Model) Capture(seqs [][]int32, cfg CaptureConfig) (*Capture, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if len(seqs) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrShape)
	}
	rows := make([][]int, len(seqs))
	var spans []span
	for i, s := range seqs {
		if len(s) < 2 {
			return nil, fmt.Errorf("%w: sequence %d has %d tokens (need ≥ 2)", ErrShape, i, len(s))
		}
		for t := 1; t < len(s); t++ {
			rows[i] = append(rows[i], t)
		}
		spans = append(spans, span{i, 0, len(rows[i])})
	}
	p, err := m.packSpans(seqs, rows, spans)
	if err != nil {
		return nil, err
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("%w: MaxBytes %d < 0", ErrConfig, cfg.MaxBytes)
	}
	if cfg.Nodes {
		if rc := C.empo_model_capture(m.c, 1, C.int64_t(cfg.MaxBytes)); rc != C.EMPO_OK {
			return nil, statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
		}
		defer C.empo_model_capture(m.c, 0, 0)
	}
	var coef coefFunc
	if cfg.Coef != nil {
		coef = coefFunc(cfg.Coef)
	}
	out := &Capture{}
	if out.Logp, out.Ent, err = m.forward(p, coef); err != nil {
		return nil, err
	}
	if cfg.Nodes {
		if out.Nodes, err = m.capturedNodes(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// capturedNodes reads the C side's capture.
func (m *model) capturedNodes() ([]NodeOutput, error) {
	n := int(C.empo_model_capture_n(m.c))
	out := make([]NodeOutput, 0, n)
	for i := 0; i < n; i++ {
		var ci C.struct_empo_node_info
		if rc := C.empo_model_capture_info(m.c, C.int(i), &ci); rc != C.EMPO_OK {
			return nil, statusErr(rc, fmt.Sprintf("captured node %d", i))
		}
		o := NodeOutput{Index: int(ci.index), Name: C.GoString(&ci.name[0]), Op: C.GoString(&ci.op[0]),
			Type: C.GoString(C.ggml_type_name(C.enum_ggml_type(ci._type))), Backend: C.GoString(&ci.backend[0]),
			NSrc: int(ci.n_src), Backward: ci.backward != 0}
		for d := range o.Shape {
			o.Shape[d] = int64(ci.ne[d])
		}
		for j := 0; j < min(o.NSrc, int(C.EMPO_NODE_SRCS)); j++ {
			o.Srcs = append(o.Srcs, C.GoString(&ci.src[j][0]))
		}
		if ci.n > 0 {
			o.Data = make([]float32, int(ci.n))
			if rc := C.empo_model_capture_get(m.c, C.int(i), (*C.float)(unsafe.Pointer(&o.Data[0])), ci.n); rc != C.EMPO_OK {
				return nil, statusErr(rc, fmt.Sprintf("captured node %d", i))
			}
		}
		out = append(out, o)
	}
	return out, nil
}
