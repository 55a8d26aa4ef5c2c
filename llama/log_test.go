package llama

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
)

type logLine struct {
	Level, Src, Message string
}

func captureLog(t *testing.T, f func()) []logLine {
	t.Helper()
	var buf bytes.Buffer
	old, oldLevel := log.Logger, zerolog.GlobalLevel()
	log.Logger = zerolog.New(&buf)
	zerolog.SetGlobalLevel(zerolog.TraceLevel)
	defer func() { log.Logger = old; zerolog.SetGlobalLevel(oldLevel) }()
	f()
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var x logLine
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, x)
	}
	return out
}

func TestLogRouting(t *testing.T) {
	// partial lines are joined; CONT keeps the level; levels are mapped
	lines := captureLog(t, func() {
		handleLog(logLevelWarn, "first ")
		handleLog(logLevelCont, "part\nsecond line\n")
		handleLog(logLevelInfo, "info line\n")
		handleLog(logLevelDebug, "debug")
		handleLog(logLevelError, "error line\n") // flushes "debug"
	})
	want := []logLine{
		{"warn", "llama.cpp", "first part"},
		{"warn", "llama.cpp", "second line"},
		{"debug", "llama.cpp", "info line"},
		{"trace", "llama.cpp", "debug"},
		{"error", "llama.cpp", "error line"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %+v", lines)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("line %d: %+v, want %+v", i, lines[i], want[i])
		}
	}
	// real llama.cpp (and ggml) output arrives through the callback
	lines = captureLog(t, func() {
		m, err := LoadModel(tinyPath, ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		// a ggml (not llama) message: ggml's callback was replaced too
		LoadBackend(filepath.Join(t.TempDir(), "libggml-missing.so"))
	})
	var sawLoader, sawGGML bool
	for _, l := range lines {
		if l.Src == "llama.cpp" && strings.Contains(l.Message, "llama_model_loader") {
			sawLoader = true
		}
		if l.Src == "llama.cpp" && l.Level == "error" && strings.Contains(l.Message, "libggml-missing.so") {
			sawGGML = true
		}
	}
	if !sawLoader || !sawGGML {
		t.Fatalf("llama loader line %v, ggml error line %v among %d log lines", sawLoader, sawGGML, len(lines))
	}
}
