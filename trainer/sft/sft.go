package sft

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// Supervised fine-tuning (`empo2 sft`): cross-entropy on the assistant
// tokens of chat records, through the same LoRA engine as the RL updates
// (cgo.Objective.NLL: ℓ = −log π(token | prefix) per trained token,
// token-mean over the mini-batch), AdamW, global-norm clipping and the
// Updater's checkpoints (package optim). With Config.Full every weight of
// the model is trained instead (optim.FullUpdater: a cgo.LoadFull model,
// its own checkpoint format).
//
// Data: JSON Lines, one chat per line, {"messages":[{"role","content"},…]}
// (roles system, user, assistant), as written by `empo2 env demos` or by
// hand. A chat is tokenized by the rollouts' rollout.Renderer, exactly as the
// rollouts render prompts; the loss covers the content and the end-of-turn
// token of every assistant message (rollout.ChatTokens.Assistant), nothing else.

// ErrData wraps every problem with SFT data (syntax, roles, lengths).
var ErrData = errors.New("trainer: bad SFT data")

// Chat roles accepted in SFT data.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// ChatRecord is one line of SFT data. Meta is free-form (demos record the
// environment, task, variation and score there) and ignored by training.
//
// Every assistant message is trained unless Context marks it: Context[i]
// true makes message i context only, in the prompt but not in the loss (a
// tip-writing record trains its tip, not the episode's actions before
// it). In JSON this is OpenAI fine-tuning's per-message "weight": 0 on an
// assistant message (1 or absent: trained).
type ChatRecord struct {
	Messages []llama.Message
	Meta     map[string]any
	Context  []bool // len(Messages) or nil (nothing marked)
}

// chatMessage is a message as JSON: llama.Message with the optional weight.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	Weight  *int   `json:"weight,omitempty"`
}

type chatRecordJSON struct {
	Messages []chatMessage  `json:"messages"`
	Meta     map[string]any `json:"meta,omitempty"`
}

// MarshalJSON writes "weight": 0 on the context-only messages.
func (r ChatRecord) MarshalJSON() ([]byte, error) {
	j := chatRecordJSON{Messages: make([]chatMessage, len(r.Messages)), Meta: r.Meta}
	zero := 0
	for i, m := range r.Messages {
		j.Messages[i] = chatMessage{Role: m.Role, Content: m.Content}
		if r.IsContext(i) {
			j.Messages[i].Weight = &zero
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads "weight" (0 or 1, assistant messages only).
func (r *ChatRecord) UnmarshalJSON(b []byte) error {
	var j chatRecordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = ChatRecord{Messages: make([]llama.Message, len(j.Messages)), Meta: j.Meta}
	for i, m := range j.Messages {
		r.Messages[i] = llama.Message{Role: m.Role, Content: m.Content}
		if m.Weight == nil {
			continue
		}
		switch {
		case m.Role != RoleAssistant:
			return fmt.Errorf("message %d: a weight on a %s message (only assistant messages are trained)", i, m.Role)
		case *m.Weight == 0:
			if r.Context == nil {
				r.Context = make([]bool, len(j.Messages))
			}
			r.Context[i] = true
		case *m.Weight != 1:
			return fmt.Errorf("message %d: weight %d (want 0 or 1)", i, *m.Weight)
		}
	}
	return nil
}

// LastOnly returns a record whose assistant messages before the last one
// are context only: the last message is what it teaches (a tip written
// after an episode whose actions, random or wrong ones among them, are
// only its prompt).
func LastOnly(msgs []llama.Message, meta map[string]any) ChatRecord {
	r := ChatRecord{Messages: msgs, Meta: meta, Context: make([]bool, len(msgs))}
	for i := range len(msgs) - 1 {
		r.Context[i] = msgs[i].Role == RoleAssistant
	}
	return r
}

// IsContext reports whether message i is context only (not trained).
func (r ChatRecord) IsContext(i int) bool { return i < len(r.Context) && r.Context[i] }

// Check validates the record: known roles, no NUL bytes, at least one
// non-empty trained assistant message.
func (r ChatRecord) Check() error {
	if len(r.Messages) == 0 {
		return fmt.Errorf("%w: no messages", ErrData)
	}
	if r.Context != nil && len(r.Context) != len(r.Messages) {
		return fmt.Errorf("%w: %d context marks for %d messages", ErrData, len(r.Context), len(r.Messages))
	}
	assistant := false
	for i, m := range r.Messages {
		switch m.Role {
		case RoleSystem, RoleUser:
			if r.IsContext(i) {
				return fmt.Errorf("%w: message %d: a %s message marked context (only assistant messages are trained)", ErrData, i, m.Role)
			}
		case RoleAssistant:
			if strings.TrimSpace(m.Content) != "" && !r.IsContext(i) {
				assistant = true
			}
		default:
			return fmt.Errorf("%w: message %d: role %q (want system, user or assistant)", ErrData, i, m.Role)
		}
		if strings.IndexByte(m.Content, 0) >= 0 {
			return fmt.Errorf("%w: message %d contains a NUL byte", ErrData, i)
		}
	}
	if !assistant {
		return fmt.Errorf("%w: no trained assistant message with content (nothing to learn)", ErrData)
	}
	return nil
}

// ReadChatJSONL reads chat records, one JSON object per line, of any
// length; blank lines are skipped and a UTF-8 byte order mark at the start
// is accepted (as Python's json and most tools do). Errors name the line.
func ReadChatJSONL(r io.Reader) ([]ChatRecord, error) {
	br := bufio.NewReader(r)
	var out []ChatRecord
	for line := 1; ; line++ {
		b, rerr := br.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return nil, fmt.Errorf("%w: line %d: %v", ErrData, line, rerr)
		}
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
		}
		if len(bytes.TrimSpace(b)) > 0 {
			var rec ChatRecord
			if err := json.NewDecoder(bytes.NewReader(b)).Decode(&rec); err != nil {
				return nil, fmt.Errorf("%w: line %d: %v", ErrData, line, err)
			}
			if err := rec.Check(); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			out = append(out, rec)
		}
		if rerr == io.EOF {
			return out, nil
		}
	}
}

// ReadChatFile reads a JSONL file of chat records.
func ReadChatFile(path string) ([]ChatRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrData, err)
	}
	defer f.Close()
	recs, err := ReadChatJSONL(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %s holds no records", ErrData, path)
	}
	return recs, nil
}

// WriteChatJSONL writes records as JSON Lines.
func WriteChatJSONL(w io.Writer, recs []ChatRecord) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// ChatTokenizer renders a chat to tokens with its assistant spans marked;
// *rollout.Renderer implements it (the one prompt format of rollouts and SFT).
type ChatTokenizer interface {
	Tokens(msgs []llama.Message, addGenerationPrompt bool) (rollout.ChatTokens, error)
}

// Sample is one tokenized chat: Trained[t] marks the tokens whose
// prediction is in the loss (assistant contents and their end-of-turn
// tokens).
type Sample struct {
	Tokens  []int32
	Trained []bool
}

// TrainedCount is the number of trained tokens.
func (s Sample) TrainedCount() int {
	n := 0
	for _, t := range s.Trained {
		if t {
			n++
		}
	}
	return n
}

// TokenizeChat renders one record and marks its trained assistant spans
// (every assistant message's but the context-only ones').
func TokenizeChat(tk ChatTokenizer, rec ChatRecord) (Sample, error) {
	ct, err := tk.Tokens(rec.Messages, false)
	if err != nil {
		return Sample{}, fmt.Errorf("%w: rendering: %w", ErrData, err)
	}
	var asst []int // the assistant messages, in order: one span each
	for i, m := range rec.Messages {
		if m.Role == RoleAssistant {
			asst = append(asst, i)
		}
	}
	if len(ct.Assistant) != len(asst) {
		return Sample{}, fmt.Errorf("%w: %d assistant spans rendered for %d assistant messages", ErrData, len(ct.Assistant), len(asst))
	}
	s := Sample{Tokens: ct.Tokens, Trained: make([]bool, len(ct.Tokens))}
	for k, sp := range ct.Assistant {
		if sp[0] < 0 || sp[1] > len(ct.Tokens) || sp[0] > sp[1] {
			return Sample{}, fmt.Errorf("%w: assistant span %v outside %d tokens", ErrData, sp, len(ct.Tokens))
		}
		if rec.IsContext(asst[k]) {
			continue
		}
		for t := max(sp[0], 1); t < sp[1]; t++ { // token 0 has no prefix to predict it from
			s.Trained[t] = true
		}
	}
	return s, nil
}

// TokenizeStats counts what TokenizeChats did.
type TokenizeStats struct {
	Records, Tokens, Trained int
	Truncated                int // records cut to maxLen (their tail dropped)
	Dropped                  int // records with no trained token left after cutting
}

// TokenizeChats tokenizes every record; a record longer than maxLen is cut
// to its first maxLen tokens (counted in Truncated; dropped when no trained
// token is left).
func TokenizeChats(tk ChatTokenizer, recs []ChatRecord, maxLen int) ([]Sample, TokenizeStats, error) {
	var st TokenizeStats
	out := make([]Sample, 0, len(recs))
	for i, r := range recs {
		s, err := TokenizeChat(tk, r)
		if err != nil {
			return nil, st, fmt.Errorf("record %d: %w", i+1, err)
		}
		if maxLen > 0 && len(s.Tokens) > maxLen {
			s.Tokens, s.Trained = s.Tokens[:maxLen], s.Trained[:maxLen]
			st.Truncated++
		}
		n := s.TrainedCount()
		if n == 0 {
			st.Dropped++
			continue
		}
		st.Records++
		st.Tokens += len(s.Tokens)
		st.Trained += n
		out = append(out, s)
	}
	return out, st, nil
}

// PackSamples concatenates samples, in the given order, into sequences of
// at most maxLen tokens (greedy: a sample that does not fit starts a new
// sequence). Packing is the usual SFT practice (as TRL's): causal attention
// lets a later sample see an earlier one, which costs little and saves the
// padding of a batch of short samples. With maxLen ≤ 0 every sample is its
// own sequence.
func PackSamples(samples []Sample, maxLen int) []Sample {
	var out []Sample
	var cur Sample
	for _, s := range samples {
		if maxLen <= 0 {
			out = append(out, s)
			continue
		}
		if len(cur.Tokens) > 0 && len(cur.Tokens)+len(s.Tokens) > maxLen {
			out = append(out, cur)
			cur = Sample{}
		}
		cur.Tokens = append(cur.Tokens, s.Tokens...)
		cur.Trained = append(cur.Trained, s.Trained...)
	}
	if len(cur.Tokens) > 0 {
		out = append(out, cur)
	}
	return out
}

// Sequence converts a sample to a cgo sequence for the NLL objective
// (old log-probs and advantages are unused: zeros).
func (s Sample) Sequence() cgo.Sequence {
	tr := append([]bool(nil), s.Trained...)
	if len(tr) > 0 {
		tr[0] = false
	}
	return cgo.Sequence{
		Tokens:    s.Tokens,
		Trained:   tr,
		OldLogp:   make([]float32, len(s.Tokens)),
		Advantage: make([]float32, len(s.Tokens)),
	}
}

// Objective is the NLL objective with token-mean aggregation.
func Objective() cgo.Objective {
	o := cgo.DefaultObjective()
	o.NLL = true
	return o
}

// Config configures Train: the hyper-parameters of `empo2 sft` (their
// YAML keys are the top level of RunConfig, documented here).
type Config struct {
	Epochs      int     `yaml:"epochs" doc:"passes over the data"`
	LR          float64 `yaml:"lr" doc:"peak learning rate (AdamW; linear warmup, then cosine decay to min_lr), in (0, 1]"`
	MinLR       float64 `yaml:"min_lr" doc:"final learning rate of the cosine schedule, in [0, lr]"`
	Warmup      int     `yaml:"warmup" doc:"linear warmup steps"`
	WeightDecay float64 `yaml:"weight_decay" doc:"AdamW decoupled weight decay"`
	MaxGradNorm float64 `yaml:"max_grad_norm" doc:"global gradient-norm clip; 0 = off"`
	// BatchTokens: tokens (packed, incl. untrained context) per optimizer
	// step; a step takes whole sequences until it reaches this.
	BatchTokens int `yaml:"batch_tokens" doc:"tokens per optimizer step (whole packed sequences, context included)"`
	// MaxLen: packing length and per-record cut (≤ the model context);
	// Train needs it set.
	MaxLen *int `yaml:"max_len" doc:"packing length and per-record cut in tokens; null = the model's training context"`
	// MicroTokens bounds the padded tokens of one ForwardBackward call
	// (memory); nil: MaxLen.
	MicroTokens *int  `yaml:"micro_tokens" doc:"padded tokens per forward/backward call (the memory bound); null = max_len"`
	Pack        bool  `yaml:"pack" doc:"pack records into sequences of max_len tokens (false: one record per sequence)"`
	Seed        int64 `yaml:"seed" doc:"seed of the shuffling (epoch e shuffles with PCG(seed, e)) and of a fresh LoRA adapter"`
	// Full: train every weight (optim.FullUpdater over a cgo.LoadFull model)
	// instead of a LoRA adapter (optim.Updater); Train checks that its updater
	// is of this kind. Checkpoints are then optim.FullState files.
	Full bool `yaml:"full" doc:"train every weight of an F32 model (embeddings, norms and head too) and write out as a new base GGUF; memory: 4× the model in F32 + activations; the lora keys do not apply"`
	// Checkpoint: state file written every SaveEvery steps and at the end of
	// every epoch ("" = none); resume with Resume. (RunConfig.Checkpoint
	// names it in a configuration.)
	Checkpoint string `yaml:"-"`
	SaveEvery  int    `yaml:"save_every" doc:"write the checkpoint every N steps (and after every epoch); 0 = after every epoch only"`
	Resume     bool   `yaml:"resume" doc:"continue from the checkpoint when it exists (same data, seed, max_len, pack and batch_tokens)"`
	// Progress, when set, is called after every step.
	Progress func(Progress) `yaml:"-"`
	// EpochDone, when set, is called after every epoch with its summary.
	EpochDone func(Epoch) `yaml:"-"`
}

// DefaultConfig: 3 epochs, lr 1e-3 cosine to 1e-4 with 10 warmup steps,
// clip 1, 4096 tokens per step, packing, seed 1, a checkpoint every 50
// steps; MaxLen unset (RunConfig: the model's context).
func DefaultConfig() Config {
	return Config{Epochs: 3, LR: 1e-3, MinLR: 1e-4, Warmup: 10, MaxGradNorm: 1, BatchTokens: 4096, Pack: true, Seed: 1, SaveEvery: 50}
}

// maxLen is MaxLen (0 when unset).
func (cfg *Config) maxLen() int {
	if cfg.MaxLen == nil {
		return 0
	}
	return *cfg.MaxLen
}

// microTokens is MicroTokens, MaxLen when unset.
func (cfg *Config) microTokens() int {
	if cfg.MicroTokens == nil {
		return cfg.maxLen()
	}
	return *cfg.MicroTokens
}

// maxLR bounds the learning rate: AdamW moves every weight by about lr per
// step, so a rate above 1 destroys the model in one step.
const maxLR = 1.0

// Progress reports one optimizer step.
type Progress struct {
	Epoch, Epochs int
	Step, Steps   int64 // global step done (1-based) and total
	Loss          float64
	LR            float64
	GradNorm      float64
	Tokens        int // trained tokens of the step
	Elapsed       time.Duration
}

// Epoch summarises one epoch.
type Epoch struct {
	Epoch     int     // 1-based
	TrainLoss float64 // token-mean NLL over the epoch's trained tokens (before each step)
	ValLoss   float64 // NaN without validation data
	Tokens    int     // trained tokens
	Elapsed   time.Duration
}

// Result is what Train returns.
type Result struct {
	Epochs []Epoch
	Steps  int64
}

// Evaluator computes forward-only statistics (*cgo.Model implements it).
type Evaluator interface {
	Evaluate(batch []cgo.Sequence, obj cgo.Objective, lossScale float32) (cgo.Stats, error)
}

// SFT meta keys saved in checkpoints.
const (
	metaSFTEpoch = "sft.epoch" // epoch in progress (0-based)
	metaSFTBatch = "sft.batch" // mini-batches of that epoch done
	metaSFTSeed  = "sft.seed"
	metaSFTData  = "sft.data" // Fingerprint of the training samples and batching
)

// epochBatches shuffles samples with PCG(seed, epoch), packs them and cuts the
// packed sequences into mini-batches of ≥ batchTokens tokens.
func epochBatches(samples []Sample, cfg Config, epoch int) [][]cgo.Sequence {
	order := slices.Clone(samples)
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(epoch)))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	maxLen := cfg.maxLen()
	if !cfg.Pack {
		maxLen = 0
	}
	packed := PackSamples(order, maxLen)
	var out [][]cgo.Sequence
	var cur []cgo.Sequence
	n := 0
	for _, p := range packed {
		cur = append(cur, p.Sequence())
		n += len(p.Tokens)
		if n >= cfg.BatchTokens {
			out = append(out, cur)
			cur, n = nil, 0
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// Steps is the number of optimizer steps Train takes.
func Steps(samples []Sample, cfg Config) int64 {
	var n int64
	for e := 0; e < cfg.Epochs; e++ {
		n += int64(len(epochBatches(samples, cfg, e)))
	}
	return n
}

// validate is check with MaxLen set, as Train and the updaters need it.
func (cfg *Config) validate() error {
	if cfg.MaxLen == nil {
		return fmt.Errorf("%w: max length (max_len) unset: give the packing length (Run takes the model's context)", optim.ErrConfig)
	}
	return cfg.check()
}

// check checks every setting's range; an unset MaxLen passes (Run sets it
// from the model's context).
func (cfg *Config) check() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{optim.ErrConfig}, a...)...) }
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case cfg.Epochs < 1:
		return bad("epochs %d: want at least 1", cfg.Epochs)
	case !finite(cfg.LR) || cfg.LR <= 0 || cfg.LR > maxLR:
		return bad("learning rate (lr) %v: want a rate in (0, %g]", cfg.LR, maxLR)
	case !finite(cfg.MinLR) || cfg.MinLR < 0 || cfg.MinLR > cfg.LR:
		return bad("min lr (min_lr) %v: want a rate in [0, lr = %v]", cfg.MinLR, cfg.LR)
	case cfg.Warmup < 0:
		return bad("warmup %d: want ≥ 0 steps", cfg.Warmup)
	case !finite(cfg.WeightDecay) || cfg.WeightDecay < 0:
		return bad("weight_decay %v: want ≥ 0", cfg.WeightDecay)
	case !finite(cfg.MaxGradNorm) || cfg.MaxGradNorm < 0:
		return bad("max_grad_norm %v: want ≥ 0 (0 = off)", cfg.MaxGradNorm)
	case cfg.BatchTokens < 1:
		return bad("batch tokens (batch_tokens) %d: want at least 1", cfg.BatchTokens)
	case cfg.MaxLen != nil && *cfg.MaxLen < 2:
		return bad("max length (max_len) %d: want at least 2 tokens", *cfg.MaxLen)
	case cfg.MicroTokens != nil && *cfg.MicroTokens < 1:
		return bad("micro_tokens %d: want at least 1 (null = max_len)", *cfg.MicroTokens)
	case cfg.SaveEvery < 0:
		return bad("save_every %d: want ≥ 0 (0 = after every epoch only)", cfg.SaveEvery)
	}
	return nil
}

// NewUpdater makes the optim.Updater Train uses: AdamW (β 0.9/0.999),
// cosine schedule over total steps, NLL objective.
func NewUpdater(p optim.Policy, cfg Config, total int64) (*optim.Updater, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Full {
		return nil, fmt.Errorf("%w: Config.Full trains every weight: use NewFullUpdater", optim.ErrConfig)
	}
	uc := updateConfig(cfg, total)
	return optim.NewUpdater(p, uc)
}

// NewFullUpdater makes the optim.FullUpdater Train uses when cfg.Full: the
// schedule, AdamW settings, objective and micro-batching of NewUpdater,
// fresh (zero) moments.
func NewFullUpdater(p optim.FullPolicy, cfg Config, total int64) (*optim.FullUpdater, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !cfg.Full {
		return nil, fmt.Errorf("%w: NewFullUpdater needs Config.Full", optim.ErrConfig)
	}
	return optim.NewFullUpdater(p, updateConfig(cfg, total))
}

// updateConfig: AdamW (β 0.9/0.999, cfg's decay), cosine schedule over
// total steps (constant when total ≤ warmup), NLL objective, micro-batches
// of MicroTokens/MaxLen sequences.
func updateConfig(cfg Config, total int64) optim.Config {
	sched := optim.Schedule{Kind: optim.ScheduleCosine, BaseLR: cfg.LR, MinLR: cfg.MinLR, Warmup: cfg.Warmup, Total: int(total)}
	if sched.Total <= sched.Warmup {
		sched = optim.Schedule{Kind: optim.ScheduleConstant, BaseLR: cfg.LR, Warmup: 0}
	}
	ad := optim.DefaultAdamW()
	ad.WeightDecay = cfg.WeightDecay
	micro := 1
	if cfg.MicroTokens != nil {
		micro = max(1, *cfg.MicroTokens/cfg.maxLen())
	}
	return optim.Config{AdamW: ad, Schedule: sched, MaxGradNorm: cfg.MaxGradNorm, Objective: Objective(), MicroBatch: micro}
}

// Loss is the token-mean NLL of samples under ev (forward only), in
// micro-batches of at most microTokens padded tokens.
func Loss(ev Evaluator, samples []Sample, microTokens int) (loss float64, tokens int, err error) {
	obj := Objective()
	var sum float64
	var batch []cgo.Sequence
	longest := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		st, err := ev.Evaluate(batch, obj, 1)
		if err != nil {
			return err
		}
		sum += st.Loss // lossScale 1: Σ ℓ over the batch's trained tokens
		tokens += st.Tokens
		batch, longest = nil, 0
		return nil
	}
	for _, s := range samples {
		if s.TrainedCount() == 0 {
			continue
		}
		l := max(longest, len(s.Tokens))
		if len(batch) > 0 && l*(len(batch)+1) > microTokens {
			if err := flush(); err != nil {
				return 0, 0, err
			}
			l = len(s.Tokens)
		}
		batch = append(batch, s.Sequence())
		longest = l
	}
	if err := flush(); err != nil {
		return 0, 0, err
	}
	if tokens == 0 {
		return math.NaN(), 0, nil
	}
	return sum / float64(tokens), tokens, nil
}

// Updater is what Train trains with: *optim.Updater (a LoRA adapter) or
// *optim.FullUpdater (every weight). Both take one optimizer step per
// Update and write and read their own checkpoint format.
type Updater interface {
	Update(batch []cgo.Sequence) (optim.Metrics, error)
	Updates() int64 // optimizer steps taken
	// SaveWithMeta copies meta into the updater's Meta and writes its state to path.
	SaveWithMeta(path string, meta map[string]string) error
	// RestoreChecked loads the state at path, calls check with its Meta
	// (nothing is changed when check fails) and applies it.
	RestoreChecked(path string, check func(meta map[string]string) error) (map[string]string, error)
}

// isFull reports whether u trains every weight (*optim.FullUpdater).
func isFull(u Updater) bool {
	_, full := u.(*optim.FullUpdater)
	return full
}

// ErrInterrupted: Train stopped because its context was cancelled, after
// writing a checkpoint to resume from (when it has one).
var ErrInterrupted = errors.New("trainer: sft interrupted")

// Fingerprint identifies what the mini-batches of a run are made of: the
// training samples (tokens and loss masks, in order) and the settings that
// cut them into batches (max_len, pack, batch_tokens). A checkpoint
// records it; resuming on other data would replay other batches.
func Fingerprint(train []Sample, cfg Config) string {
	h := sha256.New()
	fmt.Fprintf(h, "max_len=%d pack=%v batch_tokens=%d\n", cfg.maxLen(), cfg.Pack, cfg.BatchTokens)
	var buf [4]byte
	for _, s := range train {
		binary.LittleEndian.PutUint32(buf[:], uint32(len(s.Tokens)))
		h.Write(buf[:])
		for i, t := range s.Tokens {
			binary.LittleEndian.PutUint32(buf[:], uint32(t))
			if s.Trained[i] {
				buf[3] ^= 0x80 // the mask rides in the top bit (ids are < 2^31)
			}
			h.Write(buf[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Train trains u's policy on train for cfg.Epochs epochs (validation loss
// on val after each epoch when val is non-empty and ev is not nil). With
// cfg.Resume and an existing cfg.Checkpoint, it continues from the saved
// step: same epoch, same shuffled order, next mini-batch; a checkpoint of
// another seed or other data (Fingerprint) is refused. A loss that is not
// finite stops training (the rate is too high). When ctx is cancelled,
// Train writes the checkpoint of the mini-batches done and returns
// ErrInterrupted (wrapping the context's error).
func Train(ctx context.Context, u Updater, ev Evaluator, train, val []Sample, cfg Config) (Result, error) {
	var res Result
	if err := cfg.validate(); err != nil {
		return res, err
	}
	if u == nil || isFull(u) != cfg.Full {
		return res, fmt.Errorf("%w: Config.Full is %v but the updater is not of that kind (NewUpdater: LoRA, NewFullUpdater: full)", optim.ErrConfig, cfg.Full)
	}
	if len(train) == 0 {
		return res, fmt.Errorf("%w: no training samples", ErrData)
	}
	micro := cfg.microTokens()
	fp := Fingerprint(train, cfg)
	startEpoch, startBatch := 0, 0
	if cfg.Resume && cfg.Checkpoint != "" {
		if _, err := os.Stat(cfg.Checkpoint); err == nil {
			meta, err := u.RestoreChecked(cfg.Checkpoint, func(meta map[string]string) error {
				if s := meta[metaSFTSeed]; s != "" && s != strconv.FormatInt(cfg.Seed, 10) {
					return fmt.Errorf("%w: checkpoint %s was made with seed %s, not %d", optim.ErrConfig, cfg.Checkpoint, s, cfg.Seed)
				}
				if d := meta[metaSFTData]; d != "" && d != fp {
					return fmt.Errorf("%w: checkpoint %s was made on other training data (or another max_len, pack or batch_tokens): resuming would train on other batches; give the same data or start afresh without resume",
						optim.ErrConfig, cfg.Checkpoint)
				}
				return nil
			})
			if err != nil {
				return res, err
			}
			startEpoch, _ = strconv.Atoi(meta[metaSFTEpoch])
			startBatch, _ = strconv.Atoi(meta[metaSFTBatch])
		}
	}
	steps := Steps(train, cfg)
	save := func(epoch, batch int) error {
		if cfg.Checkpoint == "" {
			return nil
		}
		return u.SaveWithMeta(cfg.Checkpoint, map[string]string{
			metaSFTEpoch: strconv.Itoa(epoch),
			metaSFTBatch: strconv.Itoa(batch),
			metaSFTSeed:  strconv.FormatInt(cfg.Seed, 10),
			metaSFTData:  fp,
		})
	}
	t0 := time.Now()
	for e := startEpoch; e < cfg.Epochs; e++ {
		te := time.Now()
		batches := epochBatches(train, cfg, e)
		ep := Epoch{Epoch: e + 1, ValLoss: math.NaN()}
		var lossSum float64
		b0 := 0
		if e == startEpoch {
			b0 = startBatch
		}
		for b := b0; b < len(batches); b++ {
			if err := ctx.Err(); err != nil {
				res.Steps = u.Updates()
				if serr := save(e, b); serr != nil {
					return res, errors.Join(fmt.Errorf("%w: %w", ErrInterrupted, err), serr)
				}
				return res, fmt.Errorf("%w at step %d: %w", ErrInterrupted, u.Updates(), err)
			}
			m, err := u.Update(batches[b])
			if err != nil {
				return res, fmt.Errorf("epoch %d, step %d: %w", e+1, u.Updates()+1, err)
			}
			if m.Skipped {
				continue
			}
			if math.IsNaN(m.Loss) || math.IsInf(m.Loss, 0) {
				return res, fmt.Errorf("%w: epoch %d, step %d: the loss is %v: training diverged (lower lr)", optim.ErrConfig, e+1, u.Updates(), m.Loss)
			}
			lossSum += m.Loss * float64(m.Tokens)
			ep.Tokens += m.Tokens
			if cfg.Progress != nil {
				cfg.Progress(Progress{Epoch: e + 1, Epochs: cfg.Epochs, Step: u.Updates(), Steps: steps, Loss: m.Loss,
					LR: m.LR, GradNorm: m.GradNorm, Tokens: m.Tokens, Elapsed: time.Since(t0)})
			}
			if cfg.SaveEvery > 0 && u.Updates()%int64(cfg.SaveEvery) == 0 && b+1 < len(batches) {
				if err := save(e, b+1); err != nil {
					return res, err
				}
			}
		}
		if ep.Tokens > 0 {
			ep.TrainLoss = lossSum / float64(ep.Tokens)
		} else {
			ep.TrainLoss = math.NaN()
		}
		if ev != nil && len(val) > 0 {
			l, _, err := Loss(ev, val, micro)
			if err != nil {
				return res, fmt.Errorf("validation after epoch %d: %w", e+1, err)
			}
			ep.ValLoss = l
		}
		ep.Elapsed = time.Since(te)
		res.Epochs = append(res.Epochs, ep)
		if err := save(e+1, 0); err != nil {
			return res, err
		}
		if cfg.EpochDone != nil {
			cfg.EpochDone(ep)
		}
	}
	res.Steps = u.Updates()
	return res, nil
}
