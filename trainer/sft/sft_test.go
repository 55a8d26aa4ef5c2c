package sft

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// sftModels writes the default tiny generated model (ctx 512) and loads it
// twice: llama.cpp for the Renderer, the cgo graph for training.
func sftModels(t testing.TB, rank int) (*rollout.Renderer, *cgo.Model, string) {
	t.Helper()
	p := testutil.TinyModelFile(t)
	lm, err := llama.LoadModel(p, llama.ModelParams{})
	require.NoError(t, err)
	t.Cleanup(func() { lm.Close() })
	r, err := rollout.NewRenderer(lm, rollout.DefaultPromptConfig())
	require.NoError(t, err)
	return r, sftLoRAModel(t, p, rank), p
}

// sftLoRAModel loads the model at path with a fresh LoRA adapter of rank
// (alpha 2·rank, seed 3: every call starts from the same weights).
func sftLoRAModel(t testing.TB, path string, rank int) *cgo.Model {
	t.Helper()
	pol, err := cgo.Load(path, cgo.LoRAConfig{Rank: rank, Alpha: float32(2 * rank), Seed: 3}, cgo.Options{Threads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { pol.Close() })
	return pol
}

// sftUpdaterFor makes the updater of cfg's kind over pol: NewUpdater
// (LoRA) or, with cfg.Full, NewFullUpdater.
func sftUpdaterFor(t testing.TB, pol *cgo.Model, cfg Config, total int64) Updater {
	t.Helper()
	if cfg.Full {
		u, err := NewFullUpdater(pol, cfg, total)
		require.NoError(t, err)
		return u
	}
	u, err := NewUpdater(pol, cfg, total)
	require.NoError(t, err)
	return u
}

// sftTrainedState is what a resumed run must reproduce bit for bit: the
// updater's weights and AdamW moments (read from the backend).
func sftTrainedState(t testing.TB, u Updater) [][][]float32 {
	t.Helper()
	switch u := u.(type) {
	case *optim.Updater:
		st, err := u.State()
		require.NoError(t, err)
		return [][][]float32{st.Adapter.Tensors(), st.Opt.M, st.Opt.V}
	case *optim.FullUpdater:
		st, err := u.State()
		require.NoError(t, err)
		return [][][]float32{st.Params, st.M, st.V}
	}
	t.Fatalf("updater %T", u)
	return nil
}

// checkSFTLossFalls trains pol with cfg on sftChats (train and validation
// = the same chats: the point is that the optimization works) and checks
// that the loss falls by more than 1 nat and that the last epoch's
// validation loss is the final loss. It returns the samples, the result
// and the final loss.
func checkSFTLossFalls(t *testing.T, r *rollout.Renderer, pol *cgo.Model, cfg Config) ([]Sample, Result, float64) {
	t.Helper()
	train, st, err := TokenizeChats(r, sftChats(), 512)
	require.NoError(t, err)
	require.Equal(t, 4, st.Records)
	before, n, err := Loss(pol, train, 2048)
	require.NoError(t, err)
	require.Equal(t, st.Trained, n)
	u := sftUpdaterFor(t, pol, cfg, Steps(train, cfg))
	res, err := Train(context.Background(), u, pol, train, train, cfg)
	require.NoError(t, err)
	require.Len(t, res.Epochs, cfg.Epochs)
	after, _, err := Loss(pol, train, 2048)
	require.NoError(t, err)
	t.Logf("full=%v: loss %.3f → %.3f in %d steps; epochs %+v", cfg.Full, before, after, res.Steps, res.Epochs)
	assert.Less(t, after, before-1.0, "loss must fall by more than 1 nat")
	assert.InDelta(t, after, res.Epochs[len(res.Epochs)-1].ValLoss, 1e-5)
	return train, res, after
}

// checkSFTResume: resuming from the end-of-epoch checkpoint gives the same
// weights and moments as an uninterrupted run, bit for bit (constant
// learning rate, same shuffles). cfg is run for 2 epochs, then for 1 epoch
// to a new checkpoint, then resumed from it for epoch 2, each run on a
// fresh model from newPol; a checkpoint of another seed is refused. It
// returns the epoch-1 checkpoint.
func checkSFTResume(t *testing.T, train []Sample, cfg Config, newPol func() *cgo.Model) string {
	t.Helper()
	cfg.Epochs = 2
	cfg.Checkpoint = filepath.Join(t.TempDir(), "state.gguf")
	total := Steps(train, cfg)
	run := func(c Config) (Updater, Result) {
		u := sftUpdaterFor(t, newPol(), c, total)
		res, err := Train(context.Background(), u, nil, train, nil, c)
		require.NoError(t, err)
		return u, res
	}
	u, _ := run(cfg)
	c1 := cfg
	c1.Epochs = 1
	c1.Checkpoint = filepath.Join(t.TempDir(), "state.gguf")
	run(c1)
	// a fresh model and updater resume at epoch 2
	c2 := cfg
	c2.Checkpoint, c2.Resume = c1.Checkpoint, true
	u2, res := run(c2)
	require.Len(t, res.Epochs, 1)
	assert.Equal(t, 2, res.Epochs[0].Epoch)
	assert.Equal(t, u.Updates(), u2.Updates())
	assert.Equal(t, sftTrainedState(t, u), sftTrainedState(t, u2), "resumed run must equal the uninterrupted one bit for bit")

	// a checkpoint of another seed is refused
	c3 := c2
	c3.Seed = 99
	_, err := Train(context.Background(), sftUpdaterFor(t, newPol(), c3, total), nil, train, nil, c3)
	assert.ErrorIs(t, err, optim.ErrConfig)
	return c1.Checkpoint
}

// sftChats: short chats in the trainer's format, each with two assistant
// turns whose answers follow from the user text.
func sftChats() []ChatRecord {
	pc := rollout.DefaultPromptConfig()
	var out []ChatRecord
	for _, c := range []struct{ task, obs, a1, o1, a2 string }{
		{"open the red door", "You see a red door.", "open red door", "The red door is open.", "go to red room"},
		{"open the blue door", "You see a blue door.", "open blue door", "The blue door is open.", "go to blue room"},
		{"pick up the key", "A key lies here.", "pick up key", "You have the key.", "inventory"},
		{"look at the lamp", "A lamp is here.", "look at lamp", "It is a lamp.", "activate lamp"},
	} {
		msgs := rollout.Messages(pc, c.task, c.obs, []rollout.Turn{{Action: c.a1, Observation: c.o1}}, "")
		msgs = append(msgs, llama.Message{Role: RoleAssistant, Content: c.a2})
		out = append(out, ChatRecord{Messages: msgs})
	}
	return out
}

func TestReadChatJSONL(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteChatJSONL(&buf, sftChats()))
	buf.WriteString("\n") // blank lines are skipped
	recs, err := ReadChatJSONL(&buf)
	require.NoError(t, err)
	assert.Equal(t, sftChats(), recs)

	for name, line := range map[string]string{
		"syntax":       `{"messages": [`,
		"role":         `{"messages":[{"role":"tool","content":"x"},{"role":"assistant","content":"a"}]}`,
		"no assistant": `{"messages":[{"role":"user","content":"x"}]}`,
		"empty answer": `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"  "}]}`,
		"nul":          `{"messages":[{"role":"user","content":"a\u0000b"},{"role":"assistant","content":"a"}]}`,
		"no messages":  `{}`,
		"only context": `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"a","weight":0}]}`,
		"user weight":  `{"messages":[{"role":"user","content":"x","weight":0},{"role":"assistant","content":"a"}]}`,
		"weight 2":     `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"a","weight":2}]}`,
	} {
		_, err := ReadChatJSONL(strings.NewReader(`{"messages":[{"role":"user","content":"ok"},{"role":"assistant","content":"a"}]}` + "\n" + line + "\n"))
		require.Error(t, err, name)
		assert.True(t, errors.Is(err, ErrData), name)
		assert.Contains(t, err.Error(), "line 2", name)
	}
}

// A UTF-8 byte order mark before the first record is accepted, and a line
// longer than any buffer (issue 38: "bufio.Scanner: token too long") is
// read whole; a bad line after it is named by its number.
func TestReadChatJSONLBOMAndLongLines(t *testing.T) {
	rec := `{"messages":[{"role":"user","content":"ok"},{"role":"assistant","content":"a"}]}`
	recs, err := ReadChatJSONL(strings.NewReader("\xef\xbb\xbf" + rec + "\n"))
	require.NoError(t, err)
	require.Len(t, recs, 1)

	long := strings.Repeat("x", 70<<20) // above the former 64 MiB line limit
	data := rec + "\n" + `{"messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"a"}]}` + "\n" + `{"messages": [` + "\n"
	_, err = ReadChatJSONL(strings.NewReader(data))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 3")
	recs, err = ReadChatJSONL(strings.NewReader(rec + "\n" + `{"messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"a"}]}`))
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Len(t, recs[1].Messages[0].Content, len(long))
}

// OpenAI fine-tuning's per-message "weight": 0 makes an assistant message
// context only; it survives a write and read, and LastOnly marks every
// assistant message but the last.
func TestChatRecordWeights(t *testing.T) {
	msgs := []llama.Message{{Role: RoleUser, Content: "go"}, {Role: RoleAssistant, Content: "look"},
		{Role: RoleUser, Content: "a room"}, {Role: RoleAssistant, Content: "wait"},
		{Role: RoleUser, Content: "tip?"}, {Role: RoleAssistant, Content: "I looked."}}
	rec := LastOnly(msgs, map[string]any{"tip": true})
	assert.Equal(t, []bool{false, true, false, true, false, false}, rec.Context)
	var buf bytes.Buffer
	require.NoError(t, WriteChatJSONL(&buf, []ChatRecord{rec}))
	assert.Equal(t, 2, strings.Count(buf.String(), `"weight":0`), buf.String())
	got, err := ReadChatJSONL(&buf)
	require.NoError(t, err)
	assert.Equal(t, []ChatRecord{rec}, got)
	// "weight": 1 is the default: no marks
	got, err = ReadChatJSONL(strings.NewReader(`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"a","weight":1}]}`))
	require.NoError(t, err)
	assert.Nil(t, got[0].Context)
}

// A context-only assistant message is rendered but not trained: the
// trained mask is the last assistant span alone, so the loss differs from
// the same chat's with every assistant message trained.
func TestSFTContextMessagesNotTrained(t *testing.T) {
	r, pol, _ := sftModels(t, 4)
	rec := sftChats()[0]
	rec = LastOnly(rec.Messages, nil)
	s, err := TokenizeChat(r, rec)
	require.NoError(t, err)
	ct, err := r.Tokens(rec.Messages, false)
	require.NoError(t, err)
	require.Len(t, ct.Assistant, 2)
	last := ct.Assistant[len(ct.Assistant)-1]
	for t0 := range s.Tokens {
		assert.Equal(t, t0 >= last[0] && t0 < last[1], s.Trained[t0], "token %d", t0)
	}
	loss := func(s Sample) float64 {
		st, err := pol.Evaluate([]cgo.Sequence{s.Sequence()}, Objective(), 1)
		require.NoError(t, err)
		return st.Loss
	}
	all, err := TokenizeChat(r, ChatRecord{Messages: rec.Messages})
	require.NoError(t, err)
	assert.Greater(t, all.TrainedCount(), s.TrainedCount(), "without marks every assistant message is trained")
	base := loss(s)
	assert.NotEqual(t, base, loss(all))
}

// The loss is taken on assistant tokens only: the trained mask is exactly
// the Renderer's assistant spans (content + end-of-turn token); a user
// token after the last assistant token can be changed without changing
// the loss, while changing an assistant token changes it.
func TestSFTLossOnlyOnAssistantTokens(t *testing.T) {
	r, pol, _ := sftModels(t, 4)
	rec := sftChats()[0]
	// a user message after the last assistant turn
	rec.Messages = append(rec.Messages, llama.Message{Role: RoleUser, Content: "The red room is dark."})
	s, err := TokenizeChat(r, rec)
	require.NoError(t, err)
	ct, err := r.Tokens(rec.Messages, false)
	require.NoError(t, err)
	require.Len(t, ct.Assistant, 2)
	eot := r.EndOfTurn()
	require.GreaterOrEqual(t, eot, int32(0))
	for t0 := range s.Tokens {
		in := false
		for _, sp := range ct.Assistant {
			in = in || (t0 >= sp[0] && t0 < sp[1])
		}
		assert.Equal(t, in, s.Trained[t0], "token %d", t0)
	}
	for i, sp := range ct.Assistant {
		assert.Equal(t, eot, s.Tokens[sp[1]-1], "assistant span %d ends with the end-of-turn token", i)
		text, err := r.Model().Detokenize(s.Tokens[sp[0] : sp[1]-1])
		require.NoError(t, err)
		assert.Equal(t, rec.Messages[2+2*i].Content, text)
	}
	last := ct.Assistant[1][1]
	loss := func(s Sample) float64 {
		st, err := pol.Evaluate([]cgo.Sequence{s.Sequence()}, Objective(), 1)
		require.NoError(t, err)
		return st.Loss
	}
	base := loss(s)
	// corrupt user tokens after the last assistant turn (the final user message)
	bad := Sample{Tokens: append([]int32(nil), s.Tokens...), Trained: s.Trained}
	require.Greater(t, len(bad.Tokens)-last, 3)
	for t0 := last + 2; t0 < len(bad.Tokens); t0++ {
		bad.Tokens[t0] = (bad.Tokens[t0] + 7) % 500
	}
	assert.Equal(t, base, loss(bad), "user tokens are not in the loss")
	// a corrupted assistant token changes the loss (the test can fail)
	bad2 := Sample{Tokens: append([]int32(nil), s.Tokens...), Trained: s.Trained}
	a0 := ct.Assistant[1][0]
	bad2.Tokens[a0] = (bad2.Tokens[a0] + 7) % 500
	assert.NotEqual(t, base, loss(bad2))

	// the NLL value: the mean of −log π over the trained tokens
	lp, err := pol.LogProbs(s.Tokens)
	require.NoError(t, err)
	var sum float64
	n := 0
	for t0, tr := range s.Trained {
		if tr {
			sum -= float64(lp[t0])
			n++
		}
	}
	st, err := pol.Evaluate([]cgo.Sequence{s.Sequence()}, Objective(), 0)
	require.NoError(t, err)
	assert.Equal(t, n, st.Tokens)
	assert.InDelta(t, sum/float64(n), st.Loss, 1e-4)
}

func TestPackSamples(t *testing.T) {
	mk := func(n int) Sample {
		s := Sample{Tokens: make([]int32, n), Trained: make([]bool, n)}
		for i := range s.Tokens {
			s.Tokens[i] = int32(n)
		}
		s.Trained[n-1] = true
		return s
	}
	in := []Sample{mk(3), mk(4), mk(5), mk(2), mk(9)}
	out := PackSamples(in, 8)
	var lens []int
	total := 0
	for _, p := range out {
		lens = append(lens, len(p.Tokens))
		total += p.TrainedCount()
	}
	assert.Equal(t, []int{7, 7, 9}, lens) // 3+4 | 5+2 | 9 (longer than maxLen: alone)
	assert.Equal(t, 5, total)
	assert.Len(t, PackSamples(in, 0), 5)
	// a packed sequence never trains its first token
	assert.False(t, out[0].Sequence().Trained[0])
}

func sftTestConfig() Config {
	cfg := DefaultConfig()
	cfg.Epochs, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.BatchTokens, cfg.MaxLen, cfg.SaveEvery = 6, 1e-2, 1e-2, 0, 120, ptr(512), 0
	return cfg
}

// SFT lowers the loss on its data.
func TestSFTLossFalls(t *testing.T) {
	r, pol, _ := sftModels(t, 8)
	cfg := sftTestConfig()
	var steps int
	cfg.Progress = func(Progress) { steps++ }
	_, res, _ := checkSFTLossFalls(t, r, pol, cfg)
	assert.Equal(t, int(res.Steps), steps)
	assert.Less(t, res.Epochs[len(res.Epochs)-1].ValLoss, res.Epochs[0].ValLoss)
}

// Resuming from the end-of-epoch checkpoint gives the same weights as an
// uninterrupted run.
func TestSFTResume(t *testing.T) {
	r, _, path := sftModels(t, 4)
	train, _, err := TokenizeChats(r, sftChats(), 512)
	require.NoError(t, err)
	checkSFTResume(t, train, sftTestConfig(), func() *cgo.Model { return sftLoRAModel(t, path, 4) })
}

func TestSFTConfigErrors(t *testing.T) {
	_, pol, _ := sftModels(t, 2)
	for _, mut := range []func(*Config){
		func(c *Config) { c.Epochs = 0 },
		func(c *Config) { c.LR = math.NaN() },
		func(c *Config) { c.BatchTokens = 0 },
		func(c *Config) { c.MaxLen = ptr(1) },
		func(c *Config) { c.MinLR = 1 },
	} {
		cfg := sftTestConfig()
		mut(&cfg)
		_, err := NewUpdater(pol, cfg, 10)
		assert.ErrorIs(t, err, optim.ErrConfig)
	}
	u, err := NewUpdater(pol, sftTestConfig(), 10)
	require.NoError(t, err)
	_, err = Train(context.Background(), u, pol, nil, nil, sftTestConfig())
	assert.ErrorIs(t, err, ErrData)
}

// sftFullModel loads the model at path for full training.
func sftFullModel(t testing.TB, path string) *cgo.Model {
	t.Helper()
	m, err := cgo.LoadFull(path, cgo.Options{Threads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func sftFullConfig() Config {
	cfg := sftTestConfig()
	cfg.Full = true
	cfg.LR, cfg.MinLR = 3e-3, 3e-3
	return cfg
}

// Full SFT (every weight) lowers the loss on its data, and the written base
// GGUF holds the trained weights.
func TestSFTFullLossFalls(t *testing.T) {
	r, _, path := sftModels(t, 2)
	pol := sftFullModel(t, path)
	train, _, after := checkSFTLossFalls(t, r, pol, sftFullConfig())

	out := filepath.Join(t.TempDir(), "base.gguf")
	require.NoError(t, pol.SaveFull(out, map[string]string{"empo2.sft.steps": "6"}))
	again := sftFullModel(t, out)
	l2, _, err := Loss(again, train, 2048)
	require.NoError(t, err)
	assert.Equal(t, after, l2, "the written base has the trained weights")
}

// Full SFT: resuming from the end-of-epoch checkpoint gives the same
// weights and moments as an uninterrupted run, bit for bit; checkpoints of
// another seed or of the other kind are refused.
func TestSFTFullResume(t *testing.T) {
	r, lpol, path := sftModels(t, 4)
	train, _, err := TokenizeChats(r, sftChats(), 512)
	require.NoError(t, err)
	fullCk := checkSFTResume(t, train, sftFullConfig(), func() *cgo.Model { return sftFullModel(t, path) })

	// a LoRA checkpoint cannot resume full SFT, nor the other way round
	lc := sftTestConfig()
	lc.Epochs, lc.Checkpoint = 1, filepath.Join(t.TempDir(), "lora.state.gguf")
	lu, err := NewUpdater(lpol, lc, Steps(train, lc))
	require.NoError(t, err)
	_, err = Train(context.Background(), lu, lpol, train, nil, lc)
	require.NoError(t, err)
	pol := sftFullModel(t, path)
	c4 := sftFullConfig()
	c4.Checkpoint, c4.Resume = lc.Checkpoint, true
	u4, err := NewFullUpdater(pol, c4, 4)
	require.NoError(t, err)
	_, err = Train(context.Background(), u4, pol, train, nil, c4)
	assert.ErrorIs(t, err, optim.ErrState)
	assert.ErrorContains(t, err, "LoRA")
	lc.Resume, lc.Checkpoint = true, fullCk
	lu2, err := NewUpdater(lpol, lc, 4)
	require.NoError(t, err)
	_, err = Train(context.Background(), lu2, lpol, train, nil, lc)
	assert.ErrorIs(t, err, optim.ErrState)
}

func TestSFTFullConfigErrors(t *testing.T) {
	_, lpol, path := sftModels(t, 2)
	pol := sftFullModel(t, path)
	// the updater kind must match Config.Full
	_, err := NewFullUpdater(pol, sftTestConfig(), 10)
	assert.ErrorIs(t, err, optim.ErrConfig)
	_, err = NewUpdater(lpol, sftFullConfig(), 10)
	assert.ErrorIs(t, err, optim.ErrConfig)
	_, err = NewFullUpdater(lpol, sftFullConfig(), 10)
	assert.ErrorIs(t, err, optim.ErrConfig)
	u, err := NewFullUpdater(pol, sftFullConfig(), 10)
	require.NoError(t, err)
	_, err = Train(context.Background(), u, pol, []Sample{{Tokens: []int32{1, 2}, Trained: []bool{false, true}}}, nil, sftTestConfig())
	assert.ErrorIs(t, err, optim.ErrConfig)
	// a full model cannot back a LoRA updater (it has no adapter)
	_, err = NewUpdater(pol, sftTestConfig(), 10)
	assert.Error(t, err)
	// a non-F32 base is refused with a clear error
	p16 := filepath.Join(t.TempDir(), "f16.gguf")
	c := modelgen.DefaultConfig()
	c.DType = "f16"
	require.NoError(t, modelgen.Write(p16, c))
	_, err = cgo.LoadFull(p16, cgo.Options{Threads: 1})
	assert.ErrorIs(t, err, cgo.ErrConfig)
	assert.ErrorContains(t, err, "F32")
}

func ptr[T any](v T) *T { return &v }
