package llama

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
)

// validateGGUF parses the file's header, metadata and tensor table in pure
// Go (package gguf) and checks the invariants that llama.cpp asserts on
// (GGML_ASSERT aborts the process) instead of reporting an error: the
// structure itself, and the tokenizer arrays (a duplicate token string, an
// array of the wrong element type or a scores/token_type array shorter than
// the token list would abort or read out of bounds).
//
// It also returns the number of learned absolute positions of the model
// (rows of position_embd.weight, e.g. BERT's 512), 0 when positions are
// not bounded by a table (RoPE): a position beyond that table fails
// GGML_ASSERT in ggml_get_rows and aborts.
//
// encoder is true for a non-causal encoder (<arch>.attention.causal false,
// e.g. BERT): such a model has no language-model head, only embeddings.
//
// With adapter set it also checks the types of the LoRA adapter keys, which
// llama.cpp's adapter loader reads with asserting getters
// (lora.CheckKeyTypes).
func validateGGUF(path string, adapter bool) (maxPos int, encoder bool, err error) {
	if err := checkGGUFFile(path); err != nil {
		return 0, false, err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", ErrModelLoad, err)
	}
	defer f.Close()
	if adapter {
		if err := lora.CheckKeyTypes(f); err != nil {
			return 0, false, fmt.Errorf("%w: %s: %v", ErrModelLoad, path, err)
		}
	} else if gt, _ := f.String(lora.KeyGeneralType); gt == "adapter" || gt == "empo2.train_state" {
		// llama.cpp would only say it rejected the file
		return 0, false, fmt.Errorf("%w: %s is a LoRA adapter (general.type %s), not a model: give the base model it was trained on as the model (-m) and this file as the adapter (--lora for eval and generate, lora.init to start training or SFT from it)",
			ErrModelLoad, path, gt)
	}
	for _, ti := range f.Tensors {
		// gguf_init_from_file divides by ne[1], ne[2] and ne[3] in its
		// overflow check: an empty dimension there crashes it (SIGFPE)
		for d := 1; d < len(ti.Shape); d++ {
			if ti.Shape[d] == 0 {
				return 0, false, fmt.Errorf("%w: %s: tensor %s has shape %v (an empty dimension after the first)", ErrModelLoad, path, ti.Name, ti.Shape)
			}
		}
	}
	if ti, ok := f.Tensor("position_embd.weight"); ok {
		if len(ti.Shape) != 2 || ti.Shape[1] == 0 || ti.Shape[1] > 1<<24 {
			return 0, false, fmt.Errorf("%w: %s: position_embd.weight has shape %v", ErrModelLoad, path, ti.Shape)
		}
		maxPos = int(ti.Shape[1])
	}
	if ti, ok := f.Tensor("token_types.weight"); ok && ti.Type != gguf.TypeF32 {
		// the BERT graph adds a view of row 0 with ggml_add, which aborts
		// on the CPU for a non-F32 operand
		return 0, false, fmt.Errorf("%w: %s: token_types.weight is %s, llama.cpp needs F32", ErrModelLoad, path, ti.Type)
	}
	if arch, ok := f.String("general.architecture"); ok {
		if causal, ok := f.Bool(arch + ".attention.causal"); ok && !causal {
			encoder = true
		}
	}
	return maxPos, encoder, checkVocab(f, path)
}

// checkVocab checks the tokenizer arrays of f.
func checkVocab(f *gguf.File, path string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrModelLoad, path}, a...)...)
	}
	if v, ok := f.Get("tokenizer.ggml.model"); ok {
		if _, isStr := v.(string); !isStr {
			return bad("tokenizer.ggml.model is %T, want string", v)
		}
	}
	v, ok := f.Get("tokenizer.ggml.tokens")
	if !ok {
		return nil // llama.cpp reports a missing vocabulary itself
	}
	toks, isStr := v.([]string)
	if !isStr {
		return bad("tokenizer.ggml.tokens is %T, want a string array", v)
	}
	seen := make(map[string]struct{}, len(toks))
	for i, t := range toks {
		// llama.cpp reads each token as a C string: it ends at a NUL byte
		if j := strings.IndexByte(t, 0); j >= 0 {
			t = t[:j]
		}
		if t == "" {
			t = "[EMPTY_" + strconv.Itoa(i) + "]" // as llama.cpp renames it
		}
		if _, dup := seen[t]; dup {
			return bad("duplicate token %q at index %d", t, i)
		}
		seen[t] = struct{}{}
	}
	if v, ok := f.Get("tokenizer.ggml.scores"); ok {
		s, isF := v.([]float32)
		if !isF || len(s) < len(toks) {
			return bad("tokenizer.ggml.scores is %T of length %d, want []float32 of %d", v, arrLen(v), len(toks))
		}
	}
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		s, isI := v.([]int32)
		if !isI || len(s) < len(toks) {
			return bad("tokenizer.ggml.token_type is %T of length %d, want []int32 of %d", v, arrLen(v), len(toks))
		}
		// a BYTE-type token (6) is rendered with token_to_byte, which
		// aborts for WPM (bert) vocabularies and, for SPM/UGM ones, throws
		// through C on a text shorter than "<0xXX>"
		model, _ := f.String("tokenizer.ggml.model")
		for i, typ := range s[:len(toks)] {
			if typ != 6 {
				continue
			}
			switch model {
			case "bert":
				return bad("token %d has type BYTE, which a %q vocabulary cannot render", i, model)
			case "llama", "t5":
				if tx := toks[i]; len(tx) != 6 || !strings.HasPrefix(tx, "<0x") || tx[5] != '>' {
					return bad("byte token %d is %q, want <0xXX>", i, tx)
				}
			}
		}
	}
	if v, ok := f.Get("tokenizer.ggml.merges"); ok {
		if _, isStr := v.([]string); !isStr {
			return bad("tokenizer.ggml.merges is %T, want a string array", v)
		}
	}
	return nil
}

func arrLen(v any) int {
	switch x := v.(type) {
	case []float32:
		return len(x)
	case []int32:
		return len(x)
	case []string:
		return len(x)
	}
	return -1
}
