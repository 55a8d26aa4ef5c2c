package trainer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/llama"
)

// Supervised fine-tuning (`empo2 sft`): cross-entropy on the assistant
// tokens of chat records, through the same LoRA engine as the RL updates
// (cgo.Objective.NLL: ℓ = −log π(token | prefix) per trained token,
// token-mean over the mini-batch), AdamW, global-norm clipping and the
// Updater's checkpoints. With SFTConfig.Full every weight of the model is
// trained instead (FullUpdater, sft_full.go: a cgo.LoadFull model, its own
// checkpoint format).
//
// Data: JSON Lines, one chat per line, {"messages":[{"role","content"},…]}
// (roles system, user, assistant), as written by `empo2 env demos` or by
// hand. A chat is tokenized by the trainer's Renderer, exactly as the
// rollouts render prompts; the loss covers the content and the end-of-turn
// token of every assistant message (ChatTokens.Assistant), nothing else.

// ErrSFTData wraps every problem with SFT data (syntax, roles, lengths).
var ErrSFTData = errors.New("trainer: bad SFT data")

// Chat roles accepted in SFT data.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// ChatRecord is one line of SFT data. Meta is free-form (demos record the
// environment, task, variation and score there) and ignored by training.
type ChatRecord struct {
	Messages []llama.Message `json:"messages"`
	Meta     map[string]any  `json:"meta,omitempty"`
}

// Check validates the record: known roles, no NUL bytes, at least one
// non-empty assistant message.
func (r ChatRecord) Check() error {
	if len(r.Messages) == 0 {
		return fmt.Errorf("%w: no messages", ErrSFTData)
	}
	assistant := false
	for i, m := range r.Messages {
		switch m.Role {
		case RoleSystem, RoleUser:
		case RoleAssistant:
			if strings.TrimSpace(m.Content) != "" {
				assistant = true
			}
		default:
			return fmt.Errorf("%w: message %d: role %q (want system, user or assistant)", ErrSFTData, i, m.Role)
		}
		if strings.IndexByte(m.Content, 0) >= 0 {
			return fmt.Errorf("%w: message %d contains a NUL byte", ErrSFTData, i)
		}
	}
	if !assistant {
		return fmt.Errorf("%w: no assistant message with content (nothing to learn)", ErrSFTData)
	}
	return nil
}

// maxSFTLine bounds one JSONL line (a packed episode is a few tens of KB).
const maxSFTLine = 64 << 20

// ReadChatJSONL reads chat records, one JSON object per line; blank lines
// are skipped. Errors name the line.
func ReadChatJSONL(r io.Reader) ([]ChatRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), maxSFTLine)
	var out []ChatRecord
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec ChatRecord
		dec := json.NewDecoder(strings.NewReader(string(b)))
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrSFTData, line, err)
		}
		if err := rec.Check(); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSFTData, err)
	}
	return out, nil
}

// ReadChatFile reads a JSONL file of chat records.
func ReadChatFile(path string) ([]ChatRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSFTData, err)
	}
	defer f.Close()
	recs, err := ReadChatJSONL(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %s holds no records", ErrSFTData, path)
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
// *Renderer implements it (the one prompt format of rollouts and SFT).
type ChatTokenizer interface {
	Tokens(msgs []llama.Message, addGenerationPrompt bool) (ChatTokens, error)
}

// SFTSample is one tokenized chat: Trained[t] marks the tokens whose
// prediction is in the loss (assistant contents and their end-of-turn
// tokens).
type SFTSample struct {
	Tokens  []int32
	Trained []bool
}

// TrainedCount is the number of trained tokens.
func (s SFTSample) TrainedCount() int {
	n := 0
	for _, t := range s.Trained {
		if t {
			n++
		}
	}
	return n
}

// TokenizeChat renders one record and marks its assistant spans.
func TokenizeChat(tk ChatTokenizer, rec ChatRecord) (SFTSample, error) {
	ct, err := tk.Tokens(rec.Messages, false)
	if err != nil {
		return SFTSample{}, fmt.Errorf("%w: rendering: %w", ErrSFTData, err)
	}
	s := SFTSample{Tokens: ct.Tokens, Trained: make([]bool, len(ct.Tokens))}
	for _, sp := range ct.Assistant {
		if sp[0] < 0 || sp[1] > len(ct.Tokens) || sp[0] > sp[1] {
			return SFTSample{}, fmt.Errorf("%w: assistant span %v outside %d tokens", ErrSFTData, sp, len(ct.Tokens))
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
func TokenizeChats(tk ChatTokenizer, recs []ChatRecord, maxLen int) ([]SFTSample, TokenizeStats, error) {
	var st TokenizeStats
	out := make([]SFTSample, 0, len(recs))
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
func PackSamples(samples []SFTSample, maxLen int) []SFTSample {
	var out []SFTSample
	var cur SFTSample
	for _, s := range samples {
		if maxLen <= 0 {
			out = append(out, s)
			continue
		}
		if len(cur.Tokens) > 0 && len(cur.Tokens)+len(s.Tokens) > maxLen {
			out = append(out, cur)
			cur = SFTSample{}
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
func (s SFTSample) Sequence() cgo.Sequence {
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

// SFTObjective is the NLL objective with token-mean aggregation.
func SFTObjective() cgo.Objective {
	o := cgo.DefaultObjective()
	o.NLL = true
	return o
}

// SFTConfig configures RunSFT.
type SFTConfig struct {
	Epochs      int     // passes over the data (≥ 1)
	LR          float64 // peak learning rate
	MinLR       float64 // cosine floor
	Warmup      int     // warmup steps
	WeightDecay float64
	MaxGradNorm float64 // global clip; ≤ 0 disables
	// BatchTokens: tokens (packed, incl. untrained context) per optimizer
	// step; a step takes whole sequences until it reaches this.
	BatchTokens int
	// MaxLen: packing length and per-record cut (≤ the model context).
	MaxLen int
	// MicroTokens bounds the padded tokens of one ForwardBackward call
	// (memory); ≤ 0: MaxLen.
	MicroTokens int
	NoPack      bool  // one record per sequence
	Seed        int64 // shuffling (epoch e uses PCG(Seed, e))
	// Full: train every weight (FullUpdater over a cgo.LoadFull model)
	// instead of a LoRA adapter (Updater); RunSFT checks that its updater
	// is of this kind. Checkpoints are then FullState files.
	Full bool
	// Checkpoint: state file written every SaveEvery steps and at the end of
	// every epoch ("" = none); resume with Resume.
	Checkpoint string
	SaveEvery  int
	Resume     bool
	// Progress, when set, is called after every step.
	Progress func(SFTProgress)
	// EpochDone, when set, is called after every epoch with its summary.
	EpochDone func(SFTEpoch)
}

// DefaultSFTConfig: 3 epochs, lr 1e-3 cosine to 1e-4 with 10 warmup steps,
// clip 1, 4096 tokens per step, seed 1.
func DefaultSFTConfig() SFTConfig {
	return SFTConfig{Epochs: 3, LR: 1e-3, MinLR: 1e-4, Warmup: 10, MaxGradNorm: 1, BatchTokens: 4096, Seed: 1, SaveEvery: 50}
}

// SFTProgress reports one optimizer step.
type SFTProgress struct {
	Epoch, Epochs int
	Step, Steps   int64 // global step done (1-based) and total
	Loss          float64
	LR            float64
	GradNorm      float64
	Tokens        int // trained tokens of the step
	Elapsed       time.Duration
}

// SFTEpoch summarises one epoch.
type SFTEpoch struct {
	Epoch     int     // 1-based
	TrainLoss float64 // token-mean NLL over the epoch's trained tokens (before each step)
	ValLoss   float64 // NaN without validation data
	Tokens    int     // trained tokens
	Elapsed   time.Duration
}

// SFTResult is what RunSFT returns.
type SFTResult struct {
	Epochs []SFTEpoch
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
)

// sftBatches shuffles samples with PCG(seed, epoch), packs them and cuts the
// packed sequences into mini-batches of ≥ batchTokens tokens.
func sftBatches(samples []SFTSample, cfg SFTConfig, epoch int) [][]cgo.Sequence {
	order := slices.Clone(samples)
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(epoch)))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	maxLen := cfg.MaxLen
	if cfg.NoPack {
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

// SFTSteps is the number of optimizer steps RunSFT takes.
func SFTSteps(samples []SFTSample, cfg SFTConfig) int64 {
	var n int64
	for e := 0; e < cfg.Epochs; e++ {
		n += int64(len(sftBatches(samples, cfg, e)))
	}
	return n
}

func (cfg *SFTConfig) validate() error {
	switch {
	case cfg.Epochs < 1:
		return fmt.Errorf("%w: epochs %d < 1", ErrConfig, cfg.Epochs)
	case !(cfg.LR > 0) || math.IsInf(cfg.LR, 0):
		return fmt.Errorf("%w: learning rate %v", ErrConfig, cfg.LR)
	case cfg.BatchTokens < 1:
		return fmt.Errorf("%w: batch tokens %d < 1", ErrConfig, cfg.BatchTokens)
	case cfg.MaxLen < 2:
		return fmt.Errorf("%w: max length %d < 2", ErrConfig, cfg.MaxLen)
	case cfg.MinLR < 0 || cfg.MinLR > cfg.LR:
		return fmt.Errorf("%w: min lr %v not in [0, lr]", ErrConfig, cfg.MinLR)
	}
	return nil
}

// NewSFTUpdater makes the Updater RunSFT uses: AdamW (β 0.9/0.999), cosine
// schedule over total steps, NLL objective.
func NewSFTUpdater(p Policy, cfg SFTConfig, total int64) (*Updater, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Full {
		return nil, fmt.Errorf("%w: SFTConfig.Full trains every weight: use NewFullSFTUpdater", ErrConfig)
	}
	uc := sftUpdateConfig(cfg, total)
	return NewUpdater(p, uc)
}

// sftUpdateConfig: AdamW (β 0.9/0.999, cfg's decay), cosine schedule over
// total steps (constant when total ≤ warmup), NLL objective, micro-batches
// of MicroTokens/MaxLen sequences.
func sftUpdateConfig(cfg SFTConfig, total int64) UpdateConfig {
	sched := Schedule{Kind: ScheduleCosine, BaseLR: cfg.LR, MinLR: cfg.MinLR, Warmup: cfg.Warmup, Total: int(total)}
	if sched.Total <= sched.Warmup {
		sched = Schedule{Kind: ScheduleConstant, BaseLR: cfg.LR, Warmup: 0}
	}
	ad := DefaultAdamW()
	ad.WeightDecay = cfg.WeightDecay
	micro := 0
	if mt := cfg.MicroTokens; mt > 0 {
		micro = max(1, mt/cfg.MaxLen)
	} else {
		micro = 1
	}
	return UpdateConfig{AdamW: ad, Schedule: sched, MaxGradNorm: cfg.MaxGradNorm, Objective: SFTObjective(), MicroBatch: micro}
}

// SFTLoss is the token-mean NLL of samples under ev (forward only), in
// micro-batches of at most microTokens padded tokens.
func SFTLoss(ev Evaluator, samples []SFTSample, microTokens int) (loss float64, tokens int, err error) {
	obj := SFTObjective()
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

// SFTUpdater is what RunSFT trains with: *Updater (a LoRA adapter) or
// *FullUpdater (every weight). Both take one optimizer step per Update and
// write and read their own checkpoint format.
type SFTUpdater interface {
	Update(batch []cgo.Sequence) (Metrics, error)
	sftFull() bool
	sftStep() int64 // updates done
	// sftSave sets meta in the updater's Meta and writes its state to path
	sftSave(path string, meta map[string]string) error
	// sftRestore loads the state at path, calls check with its Meta
	// (nothing is changed when check fails) and applies it
	sftRestore(path string, check func(meta map[string]string) error) (map[string]string, error)
}

func (u *Updater) sftFull() bool  { return false }
func (u *Updater) sftStep() int64 { return u.Step }

func (u *Updater) sftSave(path string, meta map[string]string) error {
	maps.Copy(u.Meta, meta)
	return u.Save(path)
}

func (u *Updater) sftRestore(path string, check func(map[string]string) error) (map[string]string, error) {
	return restoreChecked(path, Load, func(s *State) map[string]string { return s.Meta }, check, u.Restore)
}

// restoreChecked is sftRestore for either kind of state S: it reads the
// state at path with load, calls check with its Meta (meta reads it) and
// only then applies it with restore; it returns the Meta. Nothing is
// changed when load or check fails.
func restoreChecked[S any](path string, load func(string) (S, error), meta func(S) map[string]string,
	check func(map[string]string) error, restore func(S) error) (map[string]string, error) {
	st, err := load(path)
	if err != nil {
		return nil, err
	}
	m := meta(st)
	if err := check(m); err != nil {
		return nil, err
	}
	if err := restore(st); err != nil {
		return nil, err
	}
	return m, nil
}

// RunSFT trains u's policy on train for cfg.Epochs epochs (validation loss
// on val after each epoch when val is non-empty and ev is not nil). With
// cfg.Resume and an existing cfg.Checkpoint, it continues from the saved
// step: same epoch, same shuffled order, next mini-batch.
func RunSFT(u SFTUpdater, ev Evaluator, train, val []SFTSample, cfg SFTConfig) (SFTResult, error) {
	var res SFTResult
	if err := cfg.validate(); err != nil {
		return res, err
	}
	if u == nil || u.sftFull() != cfg.Full {
		return res, fmt.Errorf("%w: SFTConfig.Full is %v but the updater is not of that kind (NewSFTUpdater: LoRA, NewFullSFTUpdater: full)", ErrConfig, cfg.Full)
	}
	if len(train) == 0 {
		return res, fmt.Errorf("%w: no training samples", ErrSFTData)
	}
	micro := cfg.MicroTokens
	if micro <= 0 {
		micro = cfg.MaxLen
	}
	startEpoch, startBatch := 0, 0
	if cfg.Resume && cfg.Checkpoint != "" {
		if _, err := os.Stat(cfg.Checkpoint); err == nil {
			meta, err := u.sftRestore(cfg.Checkpoint, func(meta map[string]string) error {
				if s := meta[metaSFTSeed]; s != "" && s != strconv.FormatInt(cfg.Seed, 10) {
					return fmt.Errorf("%w: checkpoint %s was made with seed %s, not %d", ErrConfig, cfg.Checkpoint, s, cfg.Seed)
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
	steps := SFTSteps(train, cfg)
	save := func(epoch, batch int) error {
		if cfg.Checkpoint == "" {
			return nil
		}
		return u.sftSave(cfg.Checkpoint, map[string]string{
			metaSFTEpoch: strconv.Itoa(epoch),
			metaSFTBatch: strconv.Itoa(batch),
			metaSFTSeed:  strconv.FormatInt(cfg.Seed, 10),
		})
	}
	t0 := time.Now()
	for e := startEpoch; e < cfg.Epochs; e++ {
		te := time.Now()
		batches := sftBatches(train, cfg, e)
		ep := SFTEpoch{Epoch: e + 1, ValLoss: math.NaN()}
		var lossSum float64
		b0 := 0
		if e == startEpoch {
			b0 = startBatch
		}
		for b := b0; b < len(batches); b++ {
			m, err := u.Update(batches[b])
			if err != nil {
				return res, fmt.Errorf("epoch %d, step %d: %w", e+1, u.sftStep()+1, err)
			}
			if m.Skipped {
				continue
			}
			lossSum += m.Loss * float64(m.Tokens)
			ep.Tokens += m.Tokens
			if cfg.Progress != nil {
				cfg.Progress(SFTProgress{Epoch: e + 1, Epochs: cfg.Epochs, Step: u.sftStep(), Steps: steps, Loss: m.Loss,
					LR: m.LR, GradNorm: m.GradNorm, Tokens: m.Tokens, Elapsed: time.Since(t0)})
			}
			if cfg.SaveEvery > 0 && u.sftStep()%int64(cfg.SaveEvery) == 0 && b+1 < len(batches) {
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
			l, _, err := SFTLoss(ev, val, micro)
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
	res.Steps = u.sftStep()
	return res, nil
}
