package origbench

import (
	"fmt"
	"os"
	"testing"

	"github.com/empo2/empo2/modelgen"
	"github.com/rs/zerolog"
)

func fmtCfg(c modelgen.Config) string {
	return fmt.Sprintf("L%d_C%d_H%d_K%d_F%d_V%d_T%d_s%d_%s_tied%v", c.Layers, c.Hidden, c.Heads, c.KVHeads, c.FFN, c.Vocab, c.Ctx, c.Seed, c.DType, c.TiedEmbeddings)
}

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "empo2-cgo-test-") }

func TestMain(m *testing.M) {
	if os.Getenv("EMPO2_LLAMA_LOG") == "" {
		zerolog.SetGlobalLevel(zerolog.WarnLevel) // llama.cpp's load chatter
	}
	code := m.Run()
	if modelDir != "" {
		os.RemoveAll(modelDir)
	}
	os.Exit(code)
}
