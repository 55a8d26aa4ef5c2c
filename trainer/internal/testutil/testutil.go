// Package testutil holds the fixtures that the tests of trainer and its
// sub-packages share: generated tiny models, a tips memory, a roller over
// textlab. Only tests import it.
package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/cgo"
	_ "github.com/empo2/empo2/environments/textlab" // the rollers' environment
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/rollout"
)

func init() {
	// llama.cpp's load and context logs would drown the test output
	if os.Getenv("EMPO2_TEST_LLAMA_LOG") == "" {
		zerolog.SetGlobalLevel(zerolog.WarnLevel)
	}
}

// CgoOptions: one thread. 2 cores are shared by many processes while tests
// run, and multi-threaded ggml barriers spin badly under contention; one
// thread also makes CPU results deterministic run to run.
var CgoOptions = cgo.Options{Threads: 1, Device: "cpu"}

// TinyModelFile writes the generated tiny model (modelgen's defaults) into
// the test's temp dir.
func TinyModelFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, modelgen.Write(p, modelgen.DefaultConfig()))
	return p
}

// ModelFile writes the generated tiny model with a 2048-token context
// (textlab's observations fill 512 tokens in two turns) into the test's
// temp dir.
func ModelFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny2k.gguf")
	cfg := modelgen.DefaultConfig()
	cfg.Ctx = 2048
	require.NoError(t, modelgen.Write(p, cfg))
	return p
}

// Model loads ModelFile's model (closed when the test ends).
func Model(t testing.TB) *llama.Model {
	t.Helper()
	m, err := llama.LoadModel(ModelFile(t), llama.ModelParams{})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// Store opens an empty tips memory with the hash embedder in the test's
// temp dir.
func Store(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.Open(filepath.Join(t.TempDir(), "memory.db"), memstore.NewHashEmbedder(memstore.DefaultDim))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// Context makes an inference context over m with nSlots sequences of 2048
// tokens, one thread (closed when the test ends).
func Context(t testing.TB, m *llama.Model, nSlots int) *llama.Context {
	t.Helper()
	c, err := llama.NewContext(m, llama.ContextParams{NSeqMax: nSlots, NCtx: 2048, Threads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// Roller makes a roller over m on textlab with nSlots slots (RollerOn a
// new Context).
func Roller(t testing.TB, m *llama.Model, nSlots int, mem *memstore.Store, edit ...func(*rollout.Config, *rollout.Options)) *rollout.Roller {
	t.Helper()
	return RollerOn(t, Context(t, m, nSlots), mem, edit...)
}

// RollerOn makes a roller over c on textlab with short episodes (3 steps),
// short actions (8 tokens) and tips (12 tokens), run seed 7, retrieving
// from mem (nil: none); edit, when given, changes the settings first.
func RollerOn(t testing.TB, c *llama.Context, mem *memstore.Store, edit ...func(*rollout.Config, *rollout.Options)) *rollout.Roller {
	t.Helper()
	cfg := rollout.DefaultConfig()
	cfg.Prompt.MaxActionTokens = 8
	cfg.StepLimit = 3
	cfg.TipMaxTokens = 12
	o := rollout.Options{Env: "textlab", Memory: mem, MemoryConfig: rollout.DefaultMemoryConfig(), Seed: 7}
	for _, e := range edit {
		e(&cfg, &o)
	}
	r, err := rollout.NewRoller(c, cfg, o)
	require.NoError(t, err)
	return r
}

// Jobs makes n jobs over four textlab tasks (variation i/4 of task i%4,
// group i%4, seed 100+i), all with memory or all without.
func Jobs(n int, mem bool) []rollout.Job {
	tasks := []string{"find-living-thing", "light-bulb", "melt", "use-thermometer"}
	jobs := make([]rollout.Job, n)
	for i := range jobs {
		jobs[i] = rollout.Job{Task: tasks[i%len(tasks)], Variation: i / len(tasks), Group: i % len(tasks), Seed: int64(100 + i), Mode: algo.RolloutMode(mem)}
	}
	return jobs
}

// SameSteps compares step records (log-probs to 1e-4: batch composition
// reorders float sums), the novelty bonus aside (a memory episode that
// retrieved nothing earns it, one without memory does not; it is a function
// of Retrieved, which is compared).
func SameSteps(t *testing.T, a, b []rollout.StepRecord) {
	t.Helper()
	require.Len(t, b, len(a))
	for k := range a {
		x, y := a[k], b[k]
		assert.InDeltaSlice(t, x.OldLogp, y.OldLogp, 1e-4, "step %d", k)
		x.OldLogp, y.OldLogp = nil, nil
		x.Intrinsic, y.Intrinsic = 0, 0
		assert.Equal(t, x, y, "step %d", k)
	}
}
