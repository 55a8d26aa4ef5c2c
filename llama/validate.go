package llama

import (
	"fmt"
	"strconv"

	"github.com/empo2/empo2/gguf"
)

// validateGGUF parses the file's header, metadata and tensor table in pure
// Go (package gguf) and checks the invariants that llama.cpp asserts on
// (GGML_ASSERT aborts the process) instead of reporting an error: the
// structure itself, and the tokenizer arrays (a duplicate token string, an
// array of the wrong element type or a scores/token_type array shorter than
// the token list would abort or read out of bounds).
func validateGGUF(path string) error {
	if err := checkGGUFFile(path); err != nil {
		return err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrModelLoad, err)
	}
	defer f.Close()
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
