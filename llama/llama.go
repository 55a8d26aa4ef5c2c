package llama

/*
#cgo CXXFLAGS: -std=c++17
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/llama/llama.cpp/include -I${SRCDIR}/../third_party/ollama/ml/backend/ggml/ggml/include
#cgo CPPFLAGS: -I${SRCDIR}/../third_party/ollama/llama/llama.cpp/src
#include <stdlib.h>
#include "llama.h"
#include "ggml.h"

extern void empo2LogGo(int level, char * text);

static void empo2_log_cb(enum ggml_log_level level, const char * text, void * ud) {
	(void) ud;
	empo2LogGo((int) level, (char *) text);
}

static void empo2_set_log(void) {
	llama_log_set(empo2_log_cb, NULL);
	ggml_log_set(empo2_log_cb, NULL);
}
*/
import "C"

import (
	"errors"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	_ "github.com/ollama/ollama/llama/llama.cpp/src"
	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src"
)

// Sentinel errors. Errors returned by this package wrap one of these (test
// with errors.Is) and add detail.
var (
	// ErrModelLoad: the model file is missing, unreadable, corrupt or of an
	// unsupported architecture.
	ErrModelLoad = errors.New("llama: cannot load model")
	// ErrContext: llama.cpp could not create a context.
	ErrContext = errors.New("llama: cannot create context")
	// ErrContextFull: prompt plus requested tokens do not fit the context.
	ErrContextFull = errors.New("llama: context full")
	// ErrPromptTooLong: the prompt alone does not fit the context.
	ErrPromptTooLong = errors.New("llama: prompt too long")
	// ErrDecode: llama_decode/llama_encode failed.
	ErrDecode = errors.New("llama: decode failed")
	// ErrBadAdapter: the adapter file or tensor does not match the model.
	ErrBadAdapter = errors.New("llama: bad adapter")
	// ErrBadToken: a token id is outside [0, n_vocab).
	ErrBadToken = errors.New("llama: token id out of range")
	// ErrTokenize: the text could not be tokenized.
	ErrTokenize = errors.New("llama: tokenize failed")
	// ErrChatTemplate: the model has no usable chat template.
	ErrChatTemplate = errors.New("llama: chat template")
	// ErrInvalidArgument: a parameter is out of its valid range.
	ErrInvalidArgument = errors.New("llama: invalid argument")
	// ErrClosed: the object was used after Close.
	ErrClosed = errors.New("llama: use after close")
)

var backendOnce sync.Once

// initBackend initializes llama.cpp once per process and routes its log
// output (and ggml's, replacing the callback that ollama's ggml package
// installs in its init) into zerolog.
func initBackend() {
	backendOnce.Do(func() {
		C.empo2_set_log()
		C.llama_backend_init()
		// every backend a llama_context creates is freed after the
		// context's scheduler (backend_reset.go)
		if err := wrapAllBackends(); err != nil {
			log.Warn().Err(err).Msg("llama: backends beyond the table are freed by llama.cpp's own order")
		}
	})
}

func init() {
	// Replace ollama's ggml log sink at once, so that even messages printed
	// before the first model load go through zerolog.
	C.empo2_set_log()
}

// logState accumulates partial lines: llama.cpp prints some messages in
// several calls, continuing with GGML_LOG_LEVEL_CONT.
var logState struct {
	sync.Mutex
	buf   strings.Builder
	level int
}

// ggml log levels.
const (
	logLevelDebug = int(C.GGML_LOG_LEVEL_DEBUG)
	logLevelInfo  = int(C.GGML_LOG_LEVEL_INFO)
	logLevelWarn  = int(C.GGML_LOG_LEVEL_WARN)
	logLevelError = int(C.GGML_LOG_LEVEL_ERROR)
	logLevelCont  = int(C.GGML_LOG_LEVEL_CONT)
)

//export empo2LogGo
func empo2LogGo(level C.int, text *C.char) {
	handleLog(int(level), C.GoString(text))
}

// handleLog joins partial lines (GGML_LOG_LEVEL_CONT continues the previous
// message's level) and emits each complete line.
func handleLog(lvl int, s string) {
	logState.Lock()
	defer logState.Unlock()
	if lvl == logLevelCont {
		lvl = logState.level
	} else if logState.buf.Len() > 0 && lvl != logState.level {
		flushLog(logState.level, logState.buf.String())
		logState.buf.Reset()
	}
	logState.level = lvl
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			logState.buf.WriteString(s)
			return
		}
		logState.buf.WriteString(s[:i])
		flushLog(lvl, logState.buf.String())
		logState.buf.Reset()
		s = s[i+1:]
	}
}

// zerologLevel maps a ggml log level to zerolog. llama.cpp is chatty at INFO
// (model metadata dumps), so INFO goes to debug and DEBUG to trace.
func zerologLevel(level int) zerolog.Level {
	switch level {
	case logLevelError:
		return zerolog.ErrorLevel
	case logLevelWarn:
		return zerolog.WarnLevel
	case logLevelInfo:
		return zerolog.DebugLevel
	default:
		return zerolog.TraceLevel
	}
}

func flushLog(level int, line string) {
	line = strings.TrimRight(line, " \r\t")
	if line == "" {
		return
	}
	log.WithLevel(zerologLevel(level)).Str("src", "llama.cpp").Msg(line)
}
