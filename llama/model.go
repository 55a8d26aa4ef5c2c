package llama

/*
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// ModelParams configures LoadModel. The zero value loads on the CPU with
// mmap disabled.
type ModelParams struct {
	// GPULayers is the number of layers offloaded to a GPU backend (0: CPU
	// only; -1: all). Only meaningful when a GPU backend is loaded.
	GPULayers int
	// UseMmap maps the file instead of reading it.
	UseMmap bool
	// UseMlock locks the weights in RAM.
	UseMlock bool
	// CheckTensors validates tensor data while loading (slow).
	CheckTensors bool
}

// ModelInfo holds hyperparameters and metadata of a loaded model.
type ModelInfo struct {
	Arch      string // general.architecture, e.g. "qwen2"
	Name      string // general.name (may be empty)
	Desc      string // llama.cpp's one-line description
	NVocab    int
	NEmbd     int
	NLayer    int
	NHead     int
	NHeadKV   int
	NCtxTrain int
	NParams   uint64
	SizeBytes uint64
}

// Special token ids of a model's vocabulary; -1 where absent.
type SpecialTokens struct {
	BOS, EOS, EOT  int32
	ImStart, ImEnd int32
	AddBOS, AddEOS bool
}

// Model is a loaded llama.cpp model (llama_model). It is safe for
// concurrent use. Close it when done; Contexts and Adapters made from it
// keep it alive until they are closed too.
type Model struct {
	mu      sync.Mutex
	c       *C.struct_llama_model
	vocab   *C.struct_llama_vocab
	refs    int  // open children (contexts, adapters)
	closed  bool // Close was called
	path    string
	info    ModelInfo
	special SpecialTokens
	pieces  []string // rendered text of every token (special tokens rendered)
	eog     []bool   // end-of-generation tokens
	maxPos  int      // learned absolute positions (BERT); 0 = unbounded
	encoder bool     // non-causal encoder (BERT): embeddings only, no logits
}

// LoadModel loads a GGUF model file. Missing, truncated or corrupt files and
// unknown architectures return an error wrapping ErrModelLoad.
func LoadModel(path string, p ModelParams) (*Model, error) {
	initBackend()
	maxPos, encoder, err := validateGGUF(path, false)
	if err != nil {
		return nil, err
	}
	mp := C.llama_model_default_params()
	mp.n_gpu_layers = C.int32_t(p.GPULayers)
	if p.GPULayers < 0 {
		mp.n_gpu_layers = 999
	}
	mp.use_mmap = C.bool(p.UseMmap)
	mp.use_mlock = C.bool(p.UseMlock)
	mp.check_tensors = C.bool(p.CheckTensors)
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	cm := C.llama_model_load_from_file(cpath, mp)
	if cm == nil {
		return nil, fmt.Errorf("%w: %s: llama.cpp rejected the file (see log)", ErrModelLoad, path)
	}
	m := &Model{c: cm, vocab: C.llama_model_get_vocab(cm), path: path, maxPos: maxPos, encoder: encoder}
	m.readInfo()
	m.readVocab()
	runtime.SetFinalizer(m, func(m *Model) { m.free() })
	return m, nil
}

// checkGGUFFile validates what can be checked in Go before llama.cpp sees
// the file: it exists, is a regular file and starts with the GGUF magic.
func checkGGUFFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrModelLoad, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrModelLoad, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrModelLoad, path)
	}
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || !bytes.Equal(magic[:], []byte("GGUF")) {
		return fmt.Errorf("%w: %s is not a GGUF file", ErrModelLoad, path)
	}
	return nil
}

func (m *Model) readInfo() {
	arch, _ := m.metaString("general.architecture")
	name, _ := m.metaString("general.name")
	m.info = ModelInfo{
		Arch:      arch,
		Name:      name,
		NVocab:    int(C.llama_vocab_n_tokens(m.vocab)),
		NEmbd:     int(C.llama_model_n_embd(m.c)),
		NLayer:    int(C.llama_model_n_layer(m.c)),
		NHead:     int(C.llama_model_n_head(m.c)),
		NHeadKV:   int(C.llama_model_n_head_kv(m.c)),
		NCtxTrain: int(C.llama_model_n_ctx_train(m.c)),
		NParams:   uint64(C.llama_model_n_params(m.c)),
		SizeBytes: uint64(C.llama_model_size(m.c)),
	}
	buf := make([]byte, 256)
	n := C.llama_model_desc(m.c, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	if n > 0 {
		m.info.Desc = string(buf[:min(int(n), len(buf)-1)])
	}
	m.special = SpecialTokens{
		BOS:     int32(C.llama_vocab_bos(m.vocab)),
		EOS:     int32(C.llama_vocab_eos(m.vocab)),
		EOT:     int32(C.llama_vocab_eot(m.vocab)),
		ImStart: m.singleSpecial("<|im_start|>"),
		ImEnd:   m.singleSpecial("<|im_end|>"),
		AddBOS:  bool(C.llama_vocab_get_add_bos(m.vocab)),
		AddEOS:  bool(C.llama_vocab_get_add_eos(m.vocab)),
	}
}

// readVocab copies every token's piece and EOG flag out of C once, so that
// generation and detokenization need no cgo call per token.
func (m *Model) readVocab() {
	n := m.info.NVocab
	m.pieces = make([]string, n)
	m.eog = make([]bool, n)
	var buf []byte
	for t := 0; t < n; t++ {
		buf = m.piece(int32(t), true, buf[:0])
		m.pieces[t] = string(buf)
		m.eog[t] = bool(C.llama_vocab_is_eog(m.vocab, C.llama_token(t)))
	}
}

// singleSpecial returns the id of text when it tokenizes to one token, else -1.
func (m *Model) singleSpecial(text string) int32 {
	toks, err := m.tokenize(text, false, true)
	if err != nil || len(toks) != 1 {
		return -1
	}
	return toks[0]
}

// metaString reads a GGUF metadata value as a string, and whether it exists.
func (m *Model) metaString(key string) (string, bool) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	n := C.llama_model_meta_val_str(m.c, ckey, nil, 0)
	if n < 0 {
		return "", false
	}
	buf := make([]byte, int(n)+1)
	C.llama_model_meta_val_str(m.c, ckey, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return string(buf[:n]), true
}

// Meta returns the GGUF metadata value of key as a string, and whether it exists.
func (m *Model) Meta(key string) (string, bool) {
	if err := m.acquire(); err != nil {
		return "", false
	}
	defer m.release()
	return m.metaString(key)
}

// Path is the file the model was loaded from.
func (m *Model) Path() string { return m.path }

// Info returns the model's hyperparameters.
func (m *Model) Info() ModelInfo { return m.info }

// Special returns the model's special token ids.
func (m *Model) Special() SpecialTokens { return m.special }

// NVocab is the vocabulary size.
func (m *Model) NVocab() int { return m.info.NVocab }

// IsEOG reports whether tok ends generation (EOS, EOT, <|im_end|>, ...).
func (m *Model) IsEOG(tok int32) bool {
	if tok < 0 || int(tok) >= m.info.NVocab {
		return false
	}
	return m.eog[tok]
}

// acquire pins the C model for the duration of a call (until release).
func (m *Model) acquire() error {
	if m == nil {
		return ErrClosed
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.c == nil {
		return ErrClosed
	}
	m.refs++
	return nil
}

func (m *Model) release() {
	m.mu.Lock()
	m.refs--
	free := m.closed && m.refs == 0
	m.mu.Unlock()
	if free {
		m.free()
	}
}

func (m *Model) free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c != nil {
		C.llama_model_free(m.c)
		m.c = nil
		m.vocab = nil
	}
}

// Close releases the model. It is idempotent and safe on nil. The C memory
// is freed once every Context and Adapter made from the model is closed too.
func (m *Model) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	free := m.refs == 0
	m.mu.Unlock()
	if free {
		m.free()
		runtime.SetFinalizer(m, nil)
	}
	return nil
}

// checkTokens validates token ids before they reach C.
func (m *Model) checkTokens(toks []int32) error {
	for i, t := range toks {
		if t < 0 || int(t) >= m.info.NVocab {
			return fmt.Errorf("%w: token %d at index %d (n_vocab %d)", ErrBadToken, t, i, m.info.NVocab)
		}
	}
	return nil
}

// Tokenize converts text to token ids. addSpecial adds BOS/EOS as the model
// is configured to; parseSpecial turns special-token text such as
// "<|im_start|>" into its control token instead of plain text.
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.release()
	return m.tokenize(text, addSpecial, parseSpecial)
}

func (m *Model) tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	return vocabTokenize(m.vocab, text, addSpecial, parseSpecial)
}

// TokenPiece returns the text of one token, rendering special tokens.
func (m *Model) TokenPiece(tok int32) (string, error) {
	if err := m.acquire(); err != nil {
		return "", err
	}
	defer m.release()
	if err := m.checkTokens([]int32{tok}); err != nil {
		return "", err
	}
	return m.pieces[tok], nil
}

// piece appends the bytes of tok to dst.
func (m *Model) piece(tok int32, special bool, dst []byte) []byte {
	return vocabPiece(m.vocab, tok, special, dst)
}

// Detokenize converts token ids back to text, rendering special tokens, so
// that Tokenize(Detokenize(t), false, true) round-trips.
func (m *Model) Detokenize(toks []int32) (string, error) {
	if err := m.acquire(); err != nil {
		return "", err
	}
	defer m.release()
	if err := m.checkTokens(toks); err != nil {
		return "", err
	}
	var out []byte
	for _, t := range toks {
		out = append(out, m.pieces[t]...)
	}
	return string(out), nil
}

// Message is one chat message for ApplyChatTemplate.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatTemplate returns the model's chat template (tokenizer.chat_template).
func (m *Model) ChatTemplate() (string, error) {
	if err := m.acquire(); err != nil {
		return "", err
	}
	defer m.release()
	t := C.llama_model_chat_template(m.c, nil)
	if t == nil {
		return "", fmt.Errorf("%w: model has no chat template", ErrChatTemplate)
	}
	return C.GoString(t), nil
}

// ApplyChatTemplate formats messages with the model's chat template
// (llama.cpp's built-in template matching, not a Jinja engine). With
// addAssistant the result ends with the assistant turn's opening.
func (m *Model) ApplyChatTemplate(msgs []Message, addAssistant bool) (string, error) {
	if err := m.acquire(); err != nil {
		return "", err
	}
	defer m.release()
	tmpl := C.llama_model_chat_template(m.c, nil)
	if tmpl == nil {
		return "", fmt.Errorf("%w: model has no chat template", ErrChatTemplate)
	}
	for i, msg := range msgs { // checked before any C allocation
		if strings.IndexByte(msg.Role, 0) >= 0 || strings.IndexByte(msg.Content, 0) >= 0 {
			return "", fmt.Errorf("%w: message %d contains a NUL byte", ErrInvalidArgument, i)
		}
	}
	// The message array is zeroed Go memory holding C pointers only (allowed
	// to pass to C). Not C.malloc: storing a pointer into uninitialized C
	// memory runs the GC write barrier on the garbage it overwrites, and a
	// stale word that looks like a Go heap pointer makes the GC mark a free
	// object ("fatal error: found pointer to free object"; golang/go#19928).
	cmsgs := make([]C.struct_llama_chat_message, max(1, len(msgs)))
	total := 0
	for i, msg := range msgs {
		cmsgs[i].role = C.CString(msg.Role)
		cmsgs[i].content = C.CString(msg.Content)
		total += len(msg.Role) + len(msg.Content)
	}
	defer func() {
		for i := range msgs {
			C.free(unsafe.Pointer(cmsgs[i].role))
			C.free(unsafe.Pointer(cmsgs[i].content))
		}
	}()
	n := 2*total + 256
	for attempt := 0; attempt < 2; attempt++ {
		buf := make([]byte, n)
		got := C.llama_chat_apply_template(tmpl, &cmsgs[0], C.size_t(len(msgs)), C.bool(addAssistant),
			(*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)))
		if got < 0 {
			return "", fmt.Errorf("%w: template not supported by llama.cpp", ErrChatTemplate)
		}
		if int(got) <= len(buf) {
			return string(buf[:got]), nil
		}
		n = int(got)
	}
	return "", fmt.Errorf("%w: output size changed between calls", ErrChatTemplate)
}
