package llama

/*
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Vocab is a model file's vocabulary alone, loaded without its weights
// (llama.cpp's vocab_only): it tokenizes and renders tokens exactly as a
// Model of the same file does, in about the time it takes to read the
// vocabulary, whatever the size of the weights.
type Vocab struct {
	mu     sync.Mutex
	c      *C.struct_llama_model
	vocab  *C.struct_llama_vocab
	n      int
	pieces []string // rendered text of every token (special tokens rendered)
}

// LoadVocab loads the vocabulary of a GGUF model file. Missing, truncated or
// corrupt files return an error wrapping ErrModelLoad.
func LoadVocab(path string) (*Vocab, error) {
	initBackend()
	if _, _, err := validateGGUF(path, false); err != nil {
		return nil, err
	}
	mp := C.llama_model_default_params()
	mp.vocab_only = true
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	cm := C.llama_model_load_from_file(cpath, mp)
	if cm == nil {
		return nil, fmt.Errorf("%w: %s: llama.cpp rejected the file (see log)", ErrModelLoad, path)
	}
	v := &Vocab{c: cm, vocab: C.llama_model_get_vocab(cm)}
	v.n = int(C.llama_vocab_n_tokens(v.vocab))
	v.pieces = make([]string, v.n)
	var buf []byte
	for t := 0; t < v.n; t++ {
		buf = vocabPiece(v.vocab, int32(t), true, buf[:0])
		v.pieces[t] = string(buf)
	}
	runtime.SetFinalizer(v, func(v *Vocab) { v.Close() })
	return v, nil
}

// NVocab is the number of tokens.
func (v *Vocab) NVocab() int { return v.n }

// Tokenize is Model.Tokenize.
func (v *Vocab) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.c == nil {
		return nil, ErrClosed
	}
	return vocabTokenize(v.vocab, text, addSpecial, parseSpecial)
}

// TokenPiece is Model.TokenPiece: the text of one token, special tokens
// rendered.
func (v *Vocab) TokenPiece(tok int32) (string, error) {
	if tok < 0 || int(tok) >= v.n {
		return "", fmt.Errorf("%w: token %d (n_vocab %d)", ErrBadToken, tok, v.n)
	}
	return v.pieces[tok], nil
}

// Close frees the vocabulary; it is idempotent and safe on nil.
func (v *Vocab) Close() error {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.c != nil {
		C.llama_model_free(v.c)
		v.c, v.vocab = nil, nil
		runtime.SetFinalizer(v, nil)
	}
	return nil
}

// vocabTokenize converts text to token ids with llama_tokenize; addSpecial
// adds BOS/EOS as the vocabulary is configured to, parseSpecial turns
// special-token text such as "<|im_start|>" into its control token.
func vocabTokenize(vocab *C.struct_llama_vocab, text string, addSpecial, parseSpecial bool) ([]int32, error) {
	if len(text) > 1<<30 {
		return nil, fmt.Errorf("%w: text of %d bytes", ErrTokenize, len(text))
	}
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	n := len(text) + 8
	for attempt := 0; attempt < 2; attempt++ {
		buf := make([]int32, n)
		got := C.llama_tokenize(vocab, ctext, C.int32_t(len(text)),
			(*C.llama_token)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)),
			C.bool(addSpecial), C.bool(parseSpecial))
		if got >= 0 {
			return buf[:got], nil
		}
		if got == C.INT32_MIN {
			break
		}
		n = int(-got)
	}
	return nil, fmt.Errorf("%w: %d bytes of text", ErrTokenize, len(text))
}

// vocabPiece appends the bytes of tok to dst.
func vocabPiece(vocab *C.struct_llama_vocab, tok int32, special bool, dst []byte) []byte {
	var stack [64]byte
	n := C.llama_token_to_piece(vocab, C.llama_token(tok), (*C.char)(unsafe.Pointer(&stack[0])), C.int32_t(len(stack)), 0, C.bool(special))
	if n >= 0 {
		return append(dst, stack[:n]...)
	}
	buf := make([]byte, int(-n))
	n = C.llama_token_to_piece(vocab, C.llama_token(tok), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)), 0, C.bool(special))
	if n < 0 {
		return dst
	}
	return append(dst, buf[:n]...)
}
