package llama

/*
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unsafe"
)

// ErrQuantize: llama.cpp's quantizer refused or failed (see the log for
// its message), or QuantizeParams named an unknown type.
var ErrQuantize = errors.New("llama: quantize failed")

// QuantizeParams configures Quantize (llama_model_quantize_params).
type QuantizeParams struct {
	// Type is the target file type, by llama-quantize's names: one of
	// QuantizeTypes() ("q4_k_m", "q4_0", "q8_0", "f16", "f32", ...). The
	// k-quant mixes keep some tensors at a higher precision (e.g. Q4_K_M:
	// Q6_K for half of attn_v and ffn_down and for output.weight), and a
	// matrix whose rows are not a multiple of the type's block gets
	// llama.cpp's fallback type.
	Type string
	// Threads for quantizing; ≤ 0 means runtime.NumCPU().
	Threads int
	// AllowRequantize lets quantized input tensors be dequantized and
	// written in the target type (e.g. a Q4_K_M file to F32: its
	// dequantized weights).
	AllowRequantize bool
	// Pure writes every matrix in the target type (no k-quant mix).
	Pure bool
}

// quantizeTypes maps llama-quantize's type names to llama_ftype.
var quantizeTypes = map[string]C.enum_llama_ftype{
	"f32":    C.LLAMA_FTYPE_ALL_F32,
	"f16":    C.LLAMA_FTYPE_MOSTLY_F16,
	"bf16":   C.LLAMA_FTYPE_MOSTLY_BF16,
	"q8_0":   C.LLAMA_FTYPE_MOSTLY_Q8_0,
	"q4_0":   C.LLAMA_FTYPE_MOSTLY_Q4_0,
	"q4_1":   C.LLAMA_FTYPE_MOSTLY_Q4_1,
	"q5_0":   C.LLAMA_FTYPE_MOSTLY_Q5_0,
	"q5_1":   C.LLAMA_FTYPE_MOSTLY_Q5_1,
	"q2_k":   C.LLAMA_FTYPE_MOSTLY_Q2_K,
	"q3_k_s": C.LLAMA_FTYPE_MOSTLY_Q3_K_S,
	"q3_k_m": C.LLAMA_FTYPE_MOSTLY_Q3_K_M,
	"q3_k_l": C.LLAMA_FTYPE_MOSTLY_Q3_K_L,
	"q4_k_s": C.LLAMA_FTYPE_MOSTLY_Q4_K_S,
	"q4_k_m": C.LLAMA_FTYPE_MOSTLY_Q4_K_M,
	"q5_k_s": C.LLAMA_FTYPE_MOSTLY_Q5_K_S,
	"q5_k_m": C.LLAMA_FTYPE_MOSTLY_Q5_K_M,
	"q6_k":   C.LLAMA_FTYPE_MOSTLY_Q6_K,
}

// QuantizeTypes lists the names QuantizeParams.Type accepts, sorted.
func QuantizeTypes() []string {
	out := make([]string, 0, len(quantizeTypes))
	for k := range quantizeTypes {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Quantize writes the model in the GGUF file in (the first file of a split
// model) as the one file out in another type with llama.cpp's own
// quantizer (llama_model_quantize, what llama-quantize runs), metadata
// copied (without split keys), general.file_type set. llama.cpp writes out
// in place; a caller that must not leave a partial file writes to a
// temporary name and renames it. in is validated first (the checks LoadModel runs);
// out must not be in (or one of its splits) and its directory must exist.
func Quantize(in, out string, p QuantizeParams) error {
	ft, ok := quantizeTypes[strings.ToLower(p.Type)]
	if !ok {
		return fmt.Errorf("%w: unknown type %q (want one of %s)", ErrQuantize, p.Type, strings.Join(QuantizeTypes(), ", "))
	}
	initBackend()
	if _, _, err := validateGGUF(in, false); err != nil {
		return err
	}
	ai, err1 := filepath.Abs(in)
	ao, err2 := filepath.Abs(out)
	if err1 != nil || err2 != nil || ai == ao {
		return fmt.Errorf("%w: output %s is the input", ErrQuantize, out)
	}
	if st, err := os.Stat(filepath.Dir(ao)); err != nil || !st.IsDir() {
		return fmt.Errorf("%w: output directory of %s does not exist", ErrQuantize, out)
	}
	qp := C.llama_model_quantize_default_params()
	qp.ftype = ft
	qp.nthread = C.int32_t(p.Threads)
	if p.Threads <= 0 {
		qp.nthread = C.int32_t(runtime.NumCPU())
	}
	qp.allow_requantize = C.bool(p.AllowRequantize)
	qp.pure = C.bool(p.Pure)
	cin, cout := C.CString(in), C.CString(out)
	defer C.free(unsafe.Pointer(cin))
	defer C.free(unsafe.Pointer(cout))
	if rc := C.llama_model_quantize(cin, cout, &qp); rc != 0 {
		return fmt.Errorf("%w: %s → %s as %s (see the log for llama.cpp's reason)", ErrQuantize, in, out, p.Type)
	}
	return nil
}
