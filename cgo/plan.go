package cgo

/*
#include "empo_train.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sort"
	"unsafe"
)

// Response-only log-probs and the compute cap.
//
// Every graph projects to the vocabulary only the rows whose log-probs are
// used (the C side gathers their hidden states before the output norm and
// head), so a call's cost in the head is rows × V, not tokens × V. The
// compute buffer of a graph is measured by ggml's own allocator on the
// graph (empo_model_measure) before anything is allocated; a call whose
// graph would exceed the cap (Options.MaxComputeBytes) is split here:
// sequences over several graphs, and when one sequence alone is too large,
// its rows over several graphs, each with the sequence cut after its last
// row (a row depends on its prefix only). A single row that does not fit is
// refused with ErrComputeCap naming the sizes. The plan depends only on the
// sequences, their rows and the graph kind, so TrainedLogProbs and
// ForwardBackward, which plan with the training graph, compute the same
// graphs.

// span is the part of one sequence that a graph computes: the log-probs at
// positions rows[seq][lo:hi] (ascending, ≥ 1).
type span struct{ seq, lo, hi int }

// packSpans lays out the graph batch of spans: each sequence cut after the
// last position of its span, right-padded to the longest.
func (m *model) packSpans(seqs [][]int32, rows [][]int, spans []span) (*packed, error) {
	T := 0
	for _, s := range spans {
		T = max(T, rows[s.seq][s.hi-1]+1)
	}
	if T > m.info.NCtxTrain {
		return nil, fmt.Errorf("%w: sequence length %d exceeds the context %d", ErrShape, T, m.info.NCtxTrain)
	}
	B := len(spans)
	p := &packed{B: B, T: T, tokens: make([]int32, T*B), pos: make([]int32, T*B)}
	V := int32(m.info.NVocab)
	for b, sp := range spans {
		s := seqs[sp.seq]
		for t := 0; t < T; t++ {
			p.pos[t+T*b] = int32(t)
			if t < len(s) {
				if s[t] < 0 || s[t] >= V {
					return nil, fmt.Errorf("%w: token id %d at position %d is outside the vocabulary [0, %d)", ErrShape, s[t], t, V)
				}
				p.tokens[t+T*b] = s[t]
			}
		}
		for _, t := range rows[sp.seq][sp.lo:sp.hi] {
			p.rows = append(p.rows, int32(t-1+T*b))
			p.targets = append(p.targets, s[t])
		}
	}
	if int64(len(p.rows))*int64(V) >= 1<<31-1 {
		return nil, fmt.Errorf("%w: %d rows × vocab %d exceeds 2^31 logits", ErrShape, len(p.rows), V)
	}
	return p, nil
}

// measure returns the compute buffer (bytes) of p's forward or training graph.
func (m *model) measure(p *packed, train bool) (int64, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	b := p.cBatch(&pin)
	var n C.int64_t
	w := C.int(0)
	if train {
		w = 1
	}
	if rc := C.empo_model_measure(m.c, &b, w, &n); rc != C.EMPO_OK {
		return 0, statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
	}
	runtime.KeepAlive(p)
	return int64(n), nil
}

// cBatch is p as an empo_batch; its arrays are pinned with pin.
func (p *packed) cBatch(pin *runtime.Pinner) C.struct_empo_batch {
	pin.Pin(&p.tokens[0])
	pin.Pin(&p.pos[0])
	pin.Pin(&p.rows[0])
	pin.Pin(&p.targets[0])
	return C.struct_empo_batch{
		B: C.int32_t(p.B), T: C.int32_t(p.T),
		tokens: (*C.int32_t)(unsafe.Pointer(&p.tokens[0])), pos: (*C.int32_t)(unsafe.Pointer(&p.pos[0])),
		M: C.int32_t(len(p.rows)), rows: (*C.int32_t)(unsafe.Pointer(&p.rows[0])), targets: (*C.int32_t)(unsafe.Pointer(&p.targets[0])),
	}
}

// computeCap is the cap in force (bytes; < 0: none).
func (m *model) computeCap() int64 {
	var cm C.struct_empo_model_mem
	C.empo_model_get_mem(m.c, &cm)
	return int64(cm.compute_cap)
}

// plan splits the log-probs at rows[i] of every sequence i (positions ≥ 1,
// ascending; sequences without rows are skipped) over graphs whose padded
// tokens stay within MaxTokens and whose compute buffer (forward graph, or
// the training graph with train) stays within the cap. Sequences keep
// their order and are never reordered; a sequence is split only when it
// does not fit alone.
func (m *model) plan(seqs [][]int32, rows [][]int, train bool) ([][]span, error) {
	var all []span
	for i := range seqs {
		if len(rows[i]) > 0 {
			all = append(all, span{i, 0, len(rows[i])})
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	capB, maxTok := m.computeCap(), m.maxTokens()
	var measured int64
	// fits reports whether spans make one graph within both bounds
	fits := func(spans []span) (bool, error) {
		T := 0
		for _, s := range spans {
			T = max(T, rows[s.seq][s.hi-1]+1)
		}
		if T*len(spans) > maxTok {
			return false, nil
		}
		if capB < 0 {
			return true, nil
		}
		p, err := m.packSpans(seqs, rows, spans)
		if err != nil {
			return false, err
		}
		n, err := m.measure(p, train)
		measured = n
		return n <= capB, err
	}
	if ok, err := fits(all); err != nil || ok {
		return [][]span{all}, err
	}
	var out [][]span
	var cur []span
	for _, s := range all {
		if len(cur) > 0 {
			ok, err := fits(append(cur[:len(cur):len(cur)], s))
			if err != nil {
				return nil, err
			}
			if ok {
				cur = append(cur, s)
				continue
			}
			out = append(out, cur)
			cur = nil
		}
		ok, err := fits([]span{s})
		if err != nil {
			return nil, err
		}
		if ok {
			cur = []span{s}
			continue
		}
		// one sequence alone is too large: its rows over several graphs,
		// each the longest run of rows that fits (the graph grows with the
		// rows and with the cut length, so fitting is monotone in hi)
		for lo := s.lo; lo < s.hi; {
			one := span{s.seq, lo, lo + 1}
			ok, err := fits([]span{one})
			if err != nil {
				return nil, err
			}
			if !ok {
				L := rows[s.seq][lo] + 1
				if L > maxTok {
					return nil, fmt.Errorf("%w: sequence %d: the log-prob at position %d needs %d tokens, above MaxTokens %d",
						ErrShape, s.seq, rows[s.seq][lo], L, maxTok)
				}
				return nil, fmt.Errorf("%w: sequence %d: one log-prob at position %d (%d tokens of context, vocabulary %d) needs a %s graph with a compute buffer of %s, above the cap of %s (Options.MaxComputeBytes)",
					ErrComputeCap, s.seq, rows[s.seq][lo], L, m.info.NVocab, graphKind(train), fmtBytes(measured), fmtBytes(capB))
			}
			n := s.hi - lo
			k := sort.Search(n, func(k int) bool { // first run length k+1 that does not fit
				if k == 0 {
					return false
				}
				ok, e := fits([]span{{s.seq, lo, lo + k + 1}})
				if e != nil {
					err = e
				}
				return !ok
			})
			if err != nil {
				return nil, err
			}
			out = append(out, []span{{s.seq, lo, lo + k}})
			lo += k
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

func graphKind(train bool) string {
	if train {
		return "training"
	}
	return "forward"
}

// fmtBytes: "12.3 MiB (12897484 bytes)"
func fmtBytes(n int64) string { return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n) }
