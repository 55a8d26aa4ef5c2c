package sft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/config"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/trainer/rollout"
)

// `empo2 sft` as one library call: RunConfig is the command's whole
// configuration (a YAML file, --set, the flags as shortcuts; documented by
// its doc tags, its defaults in DefaultRunConfig), Run does what the
// command does: LoRA or full training, the data, the outputs, resume.

// LoRAConfig is the `lora` section of RunConfig: the trained adapter.
type LoRAConfig struct {
	Rank    int      `yaml:"rank" doc:"LoRA rank r"`
	Alpha   *float64 `yaml:"alpha" doc:"LoRA alpha (scale alpha/r); null = 2·rank"`
	Targets []string `yaml:"targets,flow" doc:"adapted matrices: q k v o gate up down"`
	Init    string   `yaml:"init" doc:"adapter GGUF to start from (same rank, alpha and targets, made for this model); empty = a fresh adapter (B = 0)"`
}

// alpha is Alpha, 2·rank when unset.
func (l LoRAConfig) alpha() float64 {
	if l.Alpha == nil {
		return float64(2 * l.Rank)
	}
	return *l.Alpha
}

// RunConfig configures Run: `empo2 sft`'s configuration.
type RunConfig struct {
	Model string `yaml:"model" doc:"base model GGUF (Qwen2 architecture)"`
	Data  string `yaml:"data" doc:"training chats: JSON Lines, {\"messages\": [{\"role\", \"content\"}, …]} per line"`
	Val   string `yaml:"val" doc:"validation chats (their loss after every epoch); empty = none"`
	Out   string `yaml:"out" doc:"the adapter GGUF, written after every epoch (full: the new base model GGUF)"`
	// Checkpoint names Config.Checkpoint in a configuration.
	Checkpoint string     `yaml:"checkpoint" doc:"training-state file, written every save_every steps, after every epoch and on an interrupt; empty = out with .state.gguf for .gguf"`
	Threads    int        `yaml:"threads" doc:"CPU threads; 0 = all cores"`
	LoRA       LoRAConfig `yaml:"lora" doc:"the trained LoRA adapter (not with full)"`
	Config     `yaml:",inline"`

	// OnData, when set, is told what the data are once they are tokenized.
	OnData func(DataInfo) `yaml:"-"`
	// Warn, when set, receives warnings (records cut, max_len above the
	// model's context).
	Warn func(string) `yaml:"-"`
	// ConfigFile is the configuration file the command read (an input of
	// the output guard); Force lets out and checkpoint replace existing
	// files (resume continues its own).
	ConfigFile string `yaml:"-"`
	Force      bool   `yaml:"-"`
}

// DefaultRunConfig is `empo2 sft` without a file or flags: a rank-16 LoRA
// adapter (alpha 2·rank) on every target, and DefaultConfig's training.
func DefaultRunConfig() RunConfig {
	return RunConfig{
		LoRA:   LoRAConfig{Rank: 16, Targets: []string{"q", "k", "v", "o", "gate", "up", "down"}},
		Config: DefaultConfig(),
	}
}

// ErrRunConfig wraps every problem with an sft configuration: an unknown
// key (with its line), a bad value (naming the key), an output that is an
// input.
var ErrRunConfig = errors.New("trainer: bad sft configuration")

var runSchema = config.New(DefaultRunConfig, ErrRunConfig)

// LoadRunConfig resolves an sft configuration: the defaults, the file
// (strict: an unknown key is an error naming it and its line; "" = none),
// then the overrides "key.path=value" (YAML values).
func LoadRunConfig(file string, sets []string) (RunConfig, error) { return runSchema.Load(file, sets) }

// PrintRunConfig writes c as commented YAML (`empo2 sft --print-config`).
func PrintRunConfig(w io.Writer, c RunConfig) error { return runSchema.Print(w, c) }

// RunConfigReference is the Markdown table of every key of RunConfig
// (docs/sft.md embeds it).
func RunConfigReference() string { return runSchema.Reference() }

// checkpointPath is Checkpoint, or Out with ".state.gguf" for ".gguf".
func (c *RunConfig) checkpointPath() string {
	if c.Checkpoint != "" {
		return c.Checkpoint
	}
	return strings.TrimSuffix(c.Out, ".gguf") + ".state.gguf"
}

// Validate checks every key before anything is opened; errors name the key
// and the value.
func (c *RunConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrRunConfig}, a...)...) }
	for _, k := range []struct{ key, v string }{{"model", c.Model}, {"data", c.Data}, {"out", c.Out}} {
		if k.v == "" {
			return bad("%s is required (--%s)", k.key, k.key)
		}
	}
	if c.Threads < 0 {
		return bad("threads %d: want ≥ 0 (0 = all cores)", c.Threads)
	}
	if c.Full {
		def := DefaultRunConfig().LoRA
		l := c.LoRA
		for _, k := range []struct {
			key  string
			same bool
		}{{"rank", l.Rank == def.Rank}, {"alpha", l.Alpha == nil}, {"targets", reflect.DeepEqual(l.Targets, def.Targets)}, {"init", l.Init == ""}} {
			if !k.same {
				return bad("lora.%s does not apply to full, which trains every weight and has no adapter (to continue from a trained model, give it as model)", k.key)
			}
		}
	} else {
		if c.LoRA.Rank < 1 {
			return bad("lora.rank %d: want at least 1", c.LoRA.Rank)
		}
		if a := c.LoRA.alpha(); math.IsNaN(a) || math.IsInf(a, 0) || a < 0 {
			return bad("lora.alpha %v: want a finite alpha ≥ 0", a)
		}
		ts, err := lora.ParseTargets(strings.Join(c.LoRA.Targets, ","))
		if err != nil || len(c.LoRA.Targets) == 0 {
			return bad("lora.targets %v: want some of q, k, v, o, gate, up, down", c.LoRA.Targets)
		}
		if len(ts) != len(c.LoRA.Targets) {
			return bad("lora.targets %v: a matrix is listed twice (list each adapted matrix once)", c.LoRA.Targets)
		}
	}
	if err := c.Config.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrRunConfig, err)
	}
	return nil
}

// checkOutputs refuses, before anything is opened, an out or checkpoint
// that is one of the inputs (configuration file, model, data, val,
// lora.init) or each other, however spelt (symlinks, hard links), that
// lies inside a training run directory, or that exists (unless Force or,
// for what a run being resumed wrote, Resume).
func (c *RunConfig) checkOutputs() error {
	return safefile.CheckWrite([]safefile.Path{{Flag: "out", Path: c.Out}, {Flag: "checkpoint", Path: c.checkpointPath()}},
		[]safefile.Path{{Flag: "--config", Path: c.ConfigFile}, {Flag: "model", Path: c.Model}, {Flag: "data", Path: c.Data},
			{Flag: "val", Path: c.Val}, {Flag: "lora.init", Path: c.LoRA.Init}}, c.Force || c.Resume)
}

// DataInfo is what Run tells OnData once the data are tokenized.
type DataInfo struct {
	TokenizeStats
	ValRecords int
	Steps      int64 // optimizer steps of the whole run
	MaxLen     int
	Threads    int
	Full       bool
	Tensors    int   // full: tensors trained
	StateBytes int64 // full: weights, gradients and moments on the backend
}

// RunResult is what Run did.
type RunResult struct {
	Result
	Out, Checkpoint string
	Full            bool
	Rank            int     // LoRA
	Alpha           float64 // LoRA
}

// ErrNotFinite: the trained weights hold NaN or ±Inf; nothing is written.
var ErrNotFinite = errors.New("trainer: sft: the trained weights are not finite")

// finiteAll reports the first tensor index holding NaN or ±Inf (-1: none).
func finiteAll(ts [][]float32) int {
	for i, t := range ts {
		for _, v := range t {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return i
			}
		}
	}
	return -1
}

// Run trains what cfg says: every key is checked and the outputs against
// the inputs before anything is opened; the model is loaded for LoRA or
// (full) every weight, the data tokenized by the rollouts' renderer
// (records cut to max_len), the adapter started fresh, from lora.init or
// (resume) from the checkpoint, and trained (Train); out is written after
// every epoch and at the end, never with non-finite weights. A cancelled
// ctx stops after the step in progress: the checkpoint is written and the
// error wraps ErrInterrupted; out keeps its last complete epoch.
func Run(ctx context.Context, cfg RunConfig) (res RunResult, err error) {
	warn := cfg.Warn
	if warn == nil {
		warn = func(string) {}
	}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if err := cfg.checkOutputs(); err != nil {
		return res, err
	}
	for _, p := range []struct{ key, path string }{{"model", cfg.Model}, {"data", cfg.Data}, {"val", cfg.Val}, {"lora.init", cfg.LoRA.Init}} {
		if p.path == "" {
			continue
		}
		if _, err := os.Stat(p.path); err != nil {
			return res, fmt.Errorf("%w: %s: %w", ErrRunConfig, p.key, err)
		}
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	lm, err := llama.LoadModel(cfg.Model, llama.ModelParams{})
	if err != nil {
		return res, err
	}
	defer lm.Close()
	rend, err := rollout.NewRenderer(lm, rollout.DefaultPromptConfig())
	if err != nil {
		return res, err
	}
	tc := cfg.Config
	opts := cgo.Options{Threads: threads}
	if tc.MaxLen != nil {
		opts.MaxTokens = max(*tc.MaxLen, tc.microTokens())
	}
	var policy *cgo.Model
	targets, _ := lora.ParseTargets(strings.Join(cfg.LoRA.Targets, ","))
	if tc.Full {
		policy, err = cgo.LoadFull(cfg.Model, opts)
	} else {
		policy, err = cgo.Load(cfg.Model, cgo.LoRAConfig{Rank: cfg.LoRA.Rank, Alpha: float32(cfg.LoRA.alpha()), Targets: targets, Seed: tc.Seed}, opts)
	}
	if err != nil {
		return res, err
	}
	defer policy.Close()
	ctxLen := policy.Info().NCtxTrain
	switch {
	case tc.MaxLen == nil:
		tc.MaxLen = &ctxLen
	case *tc.MaxLen > ctxLen:
		warn(fmt.Sprintf("max_len %d exceeds the model's training context %d: using %d", *tc.MaxLen, ctxLen, ctxLen))
		tc.MaxLen = &ctxLen
	}
	tc.Checkpoint = cfg.checkpointPath()
	load := func(path string) ([]Sample, TokenizeStats, error) {
		recs, err := ReadChatFile(path)
		if err != nil {
			return nil, TokenizeStats{}, err
		}
		return TokenizeChats(rend, recs, *tc.MaxLen)
	}
	train, tst, err := load(cfg.Data)
	if err != nil {
		return res, err
	}
	if len(train) == 0 {
		return res, fmt.Errorf("%w: no record of %s has an assistant token within %d tokens", ErrData, cfg.Data, *tc.MaxLen)
	}
	var val []Sample
	if cfg.Val != "" {
		if val, _, err = load(cfg.Val); err != nil {
			return res, err
		}
	}
	steps := Steps(train, tc)
	info := DataInfo{TokenizeStats: tst, ValRecords: len(val), Steps: steps, MaxLen: *tc.MaxLen, Threads: threads, Full: tc.Full}
	if tst.Truncated > 0 {
		warn(fmt.Sprintf("%d records longer than max_len %d were cut (their tail is not trained)", tst.Truncated, *tc.MaxLen))
	}
	res = RunResult{Out: cfg.Out, Checkpoint: tc.Checkpoint, Full: tc.Full}
	var u Updater
	var write func(steps int64, loss float64) error
	meta := func(steps int64, loss float64) map[string]string {
		return map[string]string{
			"empo2.sft.data":       cfg.Data,
			"empo2.sft.steps":      strconv.FormatInt(steps, 10),
			"empo2.sft.train_loss": strconv.FormatFloat(loss, 'g', 6, 64),
		}
	}
	if tc.Full {
		info.Tensors, info.StateBytes = len(policy.Params()), policy.MemoryBytes().Params
		fu, err := NewFullUpdater(policy, tc, steps)
		if err != nil {
			return res, err
		}
		u = fu
		write = func(steps int64, loss float64) error {
			ps, err := policy.ReadParams()
			if err != nil {
				return err
			}
			if i := finiteAll(ps); i >= 0 {
				return fmt.Errorf("%w: tensor %s after %d steps; %s not written (lower lr)", ErrNotFinite, policy.Params()[i].Name, steps, cfg.Out)
			}
			return policy.SaveFull(cfg.Out, meta(steps, loss))
		}
	} else {
		res.Rank, res.Alpha = cfg.LoRA.Rank, cfg.LoRA.alpha()
		lu, err := NewUpdater(policy, tc, steps)
		if err != nil {
			return res, err
		}
		if cfg.LoRA.Init != "" {
			a, err := lora.Read(cfg.LoRA.Init)
			if err != nil {
				return res, err
			}
			if err := lu.LoadAdapter(a); err != nil {
				return res, fmt.Errorf("lora.init %s: %w", cfg.LoRA.Init, err)
			}
		}
		u = lu
		write = func(steps int64, loss float64) error {
			a, err := lu.Adapter()
			if err != nil {
				return err
			}
			if i := finiteAll(a.Tensors()); i >= 0 {
				return fmt.Errorf("%w: tensor %d after %d steps; %s not written (lower lr)", ErrNotFinite, i, steps, cfg.Out)
			}
			for k, v := range meta(steps, loss) {
				a.Meta[k] = v
			}
			return a.Write(cfg.Out, gguf.TypeF32)
		}
	}
	if cfg.OnData != nil {
		cfg.OnData(info)
	}
	// the output of every finished epoch, so it can be evaluated while
	// training goes on; a failed write stops training
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	var epochErr error
	epochDone := tc.EpochDone
	tc.EpochDone = func(e Epoch) {
		if epochErr = write(u.Updates(), e.TrainLoss); epochErr != nil {
			stop()
			return
		}
		if epochDone != nil {
			epochDone(e)
		}
	}
	r, err := Train(tctx, u, policy, train, val, tc)
	res.Result = r
	if epochErr != nil {
		return res, epochErr
	}
	if err != nil {
		return res, err
	}
	loss := math.NaN()
	if n := len(r.Epochs); n > 0 {
		loss = r.Epochs[n-1].TrainLoss
	}
	return res, write(r.Steps, loss)
}
