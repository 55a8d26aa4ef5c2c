// Package gpucheck runs the GPU verification of docs/gpu.md inside the empo2
// binary, so that a machine with a GPU but no Go toolchain can run it
// (scripts/gpu-check.sh drives it through the hidden `empo2 check`
// commands):
//
//   - Rollouts: greedy generation through llama.cpp, single and batched,
//     compared with a reference run written by another process (the CPU
//     without any GPU backend loaded): the same tokens, log-probs within a
//     tolerance, and batched = single.
//   - Train: the LoRA training graph run on one batch by a reference engine
//     on the CPU and by the device engine (cgo.Load with Options.Device, and
//     cgo.LoadShared on llama.cpp's offloaded weights) in one process: log-probs,
//     the clipped objective's statistics and every LoRA gradient compared,
//     with the scheduler's splits and the nodes that ran on the CPU listed.
//     It can also dump the batch, the adapter and both engines' results for
//     the transformers + PEFT comparison (scripts/gpu_hf_check.py).
//   - Bench: rollout tokens/s at several batch sizes and one LoRA training
//     step (forward + backward + AdamW) in one process holding both.
//   - Report: the phases' records and results gathered into one JSON and one
//     Markdown report.
//
// Every result is a JSON document with a "kind" field; the report renders
// each kind. On a machine without a GPU every command still runs (the
// "device" is then the CPU), which is the dry run of the whole script.
package gpucheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/empo2/empo2/internal/safefile"
)

// ErrConfig: invalid settings of a check.
var ErrConfig = errors.New("gpucheck: invalid configuration")

// ErrMismatch: a check ran and its results disagree beyond the tolerance.
// The result is written before this error is returned.
var ErrMismatch = errors.New("gpucheck: results disagree")

// Result kinds (the "kind" field of every result document).
const (
	KindRollout = "rollout"
	KindTrain   = "train"
	KindBench   = "bench"
)

// WriteJSON writes v as indented JSON to path, atomically (safefile: a run
// cut short never leaves half a document).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return safefile.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON reads path into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// seconds is a duration in seconds, rounded to the millisecond for the report.
func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// maxAbsDiff is max_i |a[i] − b[i]| over the common length, and whether the
// lengths agree. NaN anywhere makes it +Inf (it never passes a tolerance).
func maxAbsDiff(a, b []float32) (float64, bool) {
	n := min(len(a), len(b))
	worst := 0.0
	for i := 0; i < n; i++ {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1), len(a) == len(b)
		}
		worst = math.Max(worst, d)
	}
	return worst, len(a) == len(b)
}

// relDiff is ‖got − ref‖₂ / ‖ref‖₂ (‖got − ref‖₂ when ref is 0) and ‖ref‖₂.
// A NaN or an infinity gives +Inf.
func relDiff(ref, got []float32) (rel, refNorm float64) {
	var dd, rr float64
	for i := range ref {
		var g float64
		if i < len(got) {
			g = float64(got[i])
		} else {
			g = math.NaN()
		}
		d := g - float64(ref[i])
		dd += d * d
		rr += float64(ref[i]) * float64(ref[i])
	}
	if len(got) != len(ref) || math.IsNaN(dd) || math.IsInf(dd, 0) || math.IsNaN(rr) || math.IsInf(rr, 0) {
		return math.Inf(1), math.Sqrt(rr)
	}
	if rr == 0 {
		return math.Sqrt(dd), 0
	}
	return math.Sqrt(dd / rr), math.Sqrt(rr)
}

// jsonFloat is a float64 that encodes ±Inf and NaN as strings (JSON has no
// such numbers; a failed comparison must still be written).
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	switch {
	case math.IsNaN(x):
		return []byte(`"NaN"`), nil
	case math.IsInf(x, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(x, -1):
		return []byte(`"-Inf"`), nil
	}
	return json.Marshal(x)
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*f = jsonFloat(math.NaN())
		return nil
	case `"+Inf"`:
		*f = jsonFloat(math.Inf(1))
		return nil
	case `"-Inf"`:
		*f = jsonFloat(math.Inf(-1))
		return nil
	}
	var x float64
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*f = jsonFloat(x)
	return nil
}
