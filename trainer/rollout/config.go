package rollout

// The rollout engine's configuration types: the `rollout` and `memory`
// sections of a run configuration, their enumerations and defaults.

import (
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/memstore"
)

// Config is the `rollout` section of a run configuration: how episodes
// are sampled and played, and the prompt (PromptConfig, inline: the one
// prompt format of rollouts, eval and SFT).
type Config struct {
	Temperature    float64      `yaml:"temperature" doc:"sampling temperature of training rollouts" range:"[0,100]"`
	StepLimit      int          `yaml:"step_limit" doc:"episode step limit; 0 = the environment's per-task limit" range:"[0,1e6]"`
	Prompt         PromptConfig `yaml:",inline"`
	CorrectInvalid Correction   `yaml:"correct_invalid" doc:"map an invalid action to the most similar valid one (Jaccard): auto (the environment's default: on for scienceworld, as the EMPO² recipe; off for textlab and webshop) | on | off"`
	TipMaxTokens   int          `yaml:"tip_max_tokens" doc:"max tokens of a written tip (generation also stops at the end of its first line; the reference: 512)" range:"[0,65536]"`
	TipTemperature float64      `yaml:"tip_temperature" doc:"sampling temperature of tip writing; < 0 = rollout.temperature (the reference), 0 = greedy" range:"[,100]"`
	OracleTips     bool         `yaml:"oracle_tips" doc:"the oracle-memory control (docs/experiment.md, Study 3): every written tip is the episode's true tip written by code (trainer/demos.TrajectoryTip, which textlab's tip checker verifies) instead of the policy's; the entries' action and score as always"`
	SuccessScore   float64      `yaml:"success_score" doc:"an episode succeeds when its final score reaches this; 0 = the environment's (100, the full score, on textlab and webshop; 71 on scienceworld, the EMPO² recipe's score > 70 on its integer scores)"`
}

// DefaultConfig is temperature 1, the default prompt, the environment's
// own action correction and success score, tips of at most 512 tokens (the
// reference code's last version) sampled at the rollout temperature.
func DefaultConfig() Config {
	return Config{Temperature: 1, Prompt: DefaultPromptConfig(), CorrectInvalid: CorrectAuto, TipMaxTokens: 512, TipTemperature: -1}
}

// Correction is rollout.correct_invalid: whether an action outside the
// environment's valid set is replaced by the most similar valid one
// (environments.CorrectAction) before it is played.
type Correction string

// Corrections.
const (
	CorrectAuto Correction = "auto" // the environment's default (environments.Defaults.CorrectActions)
	CorrectOn   Correction = "on"
	CorrectOff  Correction = "off"
)

// Valid reports whether c is auto, on or off ("" counts as auto).
func (c Correction) Valid() bool {
	return c == "" || c == CorrectAuto || c == CorrectOn || c == CorrectOff
}

// Enabled resolves c for an environment with defaults d.
func (c Correction) Enabled(d environments.Defaults) bool {
	if c == CorrectOn {
		return true
	}
	return c != CorrectOff && d.CorrectActions
}

// UnmarshalYAML reads auto, on or off, and also true and false (the key
// was a boolean before it had an automatic setting).
func (c *Correction) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if n.Decode(&b) == nil && n.Tag == "!!bool" {
		*c = CorrectOff
		if b {
			*c = CorrectOn
		}
		return nil
	}
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v := Correction(strings.ToLower(strings.TrimSpace(s)))
	if v == "" || !v.Valid() {
		return fmt.Errorf("line %d: correct_invalid %q: want auto, on or off", n.Line, s)
	}
	*c = v
	return nil
}

// MaxAutoContext caps the automatic per-episode context (context: 0): the
// EMPO² recipe's prompt limit (max_prompt_length 8192), which bounds the
// KV cache of models trained on long contexts (32k for Qwen2.5-7B).
const MaxAutoContext = 8192

// EpisodeContext is the per-episode context of a `context` setting with a
// model whose training context is nCtxTrain (0 = unknown): context when
// set, else the training context up to MaxAutoContext (2048 when unknown).
func EpisodeContext(context, nCtxTrain int) int {
	switch {
	case context != 0:
		return context
	case nCtxTrain <= 0:
		return 2048
	}
	return min(nCtxTrain, MaxAutoContext)
}

// Succeeded is the one success rule of training, evaluation and the greedy
// check of SFT: an episode succeeds when its final score reaches
// successScore (Config.SuccessScore, 0 = the environment's,
// environments.Defaults.Success). The EMPO² recipe counts success on
// ScienceWorld as "done and score > 70", where its wrapper ends every
// episode done (completed, failed or out of steps), so that rule is this
// one with successScore 71 on ScienceWorld's integer scores; on textlab and
// WebShop success is the full score, 100 (WebShop's reward 1).
func Succeeded(score, successScore float64) bool { return score >= successScore }

// MemoryConfig is the `memory` section of a run configuration: the tips
// memory's retrieval, the intrinsic reward of memory rollouts, and tip
// writing. Every value means what it says (no zero stands for a default);
// Validate checks them.
type MemoryConfig struct {
	Embedder      string  `yaml:"embedder" doc:"hash (built-in) | policy (the policy's mean-pooled states) | path of a BERT-type embedding GGUF"`
	Key           KeyKind `yaml:"key" doc:"retrieval key: conversation (the reference code: the chat so far without the system text; an episode's entries are all stored under its final conversation) | observation (task and latest observation; each step's entry under its own)"`
	KeyPieces     int     `yaml:"key_pieces" doc:"the embedder reads the first N pieces of a key (hash: words and single punctuation marks, memstore.CutPieces; policy or GGUF: the model's tokens); 256 = all-MiniLM-L6-v2's limit"`
	Threshold     float64 `yaml:"threshold" doc:"cosine similarity a tip must exceed to be retrieved, in [-1, 1); 0 retrieves every positive cosine (calibrated for the hash embedder with conversation keys, docs/memory.md; the reference's 0.5 was for MiniLM)"`
	TopK          int     `yaml:"top_k" doc:"tips put in the prompt, ≥ 1 (highest stored score first, ties oldest first, as the reference code's stable sort)"`
	TipsIn        TipsIn  `yaml:"tips_in" doc:"every-turn (the reference code: each turn's user message keeps the tips retrieved for it) | last-turn (only the latest user message has tips)"`
	IntrinsicCoef float64 `yaml:"intrinsic_coef" doc:"per-step novelty bonus coef/(tips+1) of memory rollouts, in score points (1: the reference's scale, at most 1% of the 0–100 range); 0 = the extrinsic score alone (the reference code's last version)"`
	Cap           int     `yaml:"cap" doc:"entries kept per task variation, oldest dropped first"`
	WriteTips     bool    `yaml:"write_tips" doc:"write one tip per training episode (entries stamped with the step)"`
}

// KeyKind is the retrieval key of memory.key.
type KeyKind string

// Retrieval keys.
const (
	// KeyConversation: the conversation so far (ConversationKey), the
	// reference code's key; an episode's entries are stored under its final
	// conversation.
	KeyConversation KeyKind = "conversation"
	// KeyObservation: the task and the latest observation (MemoryKey); each
	// step's entry is stored under that step's key.
	KeyObservation KeyKind = "observation"
)

// Valid reports whether k is a known key.
func (k KeyKind) Valid() bool { return k == KeyConversation || k == KeyObservation }

// TipsIn is where retrieved tips stay in the chat (memory.tips_in).
type TipsIn string

// Tip placements.
const (
	TipsEveryTurn TipsIn = "every-turn" // each turn's user message keeps the tips retrieved for it (the reference code)
	TipsLastTurn  TipsIn = "last-turn"  // only the latest user message carries tips
)

// Valid reports whether t is a known placement.
func (t TipsIn) Valid() bool { return t == TipsEveryTurn || t == TipsLastTurn }

// DefaultKeyPieces is all-MiniLM-L6-v2's input limit (256 word pieces),
// the reference's sentence embedder.
const DefaultKeyPieces = 256

// DefaultThreshold is memory.threshold's default: the retrieval threshold
// calibrated for the hash embedder with conversation keys cut at 256
// pieces (docs/memory.md, TestConversationKeyThreshold): every entry of a
// variation passes it, as the reference's MiniLM passes 0.5, and entries of
// other variations do not.
const DefaultThreshold = 0.5

// DefaultMemoryConfig is the reference code's memory: conversation keys
// cut at 256 pieces, the hash embedder at its calibrated threshold, the
// top 10 tips by score (ties oldest first) in every turn, the novelty
// bonus at the reference's scale, 1000 entries per task variation, tips
// written.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{Embedder: EmbedderHash, Key: KeyConversation, KeyPieces: DefaultKeyPieces, Threshold: DefaultThreshold,
		TopK: memstore.DefaultK, TipsIn: TipsEveryTurn, IntrinsicCoef: 1, Cap: 1000, WriteTips: true}
}

// Validate reports ErrRollout for a value outside its range.
func (mc MemoryConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: memory."+f, append([]any{ErrRollout}, a...)...) }
	switch {
	case mc.Embedder == "":
		return bad("embedder is empty (want %s, %s or a GGUF path)", EmbedderHash, EmbedderPolicy)
	case !mc.Key.Valid():
		return bad("key %q (want %s or %s)", mc.Key, KeyConversation, KeyObservation)
	case mc.KeyPieces < 1:
		return bad("key_pieces %d (want ≥ 1)", mc.KeyPieces)
	case !(mc.Threshold >= -1 && mc.Threshold < 1):
		return bad("threshold %v (want a cosine in [-1, 1))", mc.Threshold)
	case mc.TopK < 1:
		return bad("top_k %d (want ≥ 1 tips per prompt)", mc.TopK)
	case !mc.TipsIn.Valid():
		return bad("tips_in %q (want %s or %s)", mc.TipsIn, TipsEveryTurn, TipsLastTurn)
	case !(mc.IntrinsicCoef >= 0) || math.IsInf(mc.IntrinsicCoef, 0):
		return bad("intrinsic_coef %v (want ≥ 0)", mc.IntrinsicCoef)
	case mc.Cap < 0:
		return bad("cap %d (want ≥ 0; 0 = no cap)", mc.Cap)
	}
	return nil
}

// Query is the memstore query of the configuration: top_k, threshold, by
// stored score with ties oldest first.
func (mc MemoryConfig) Query() memstore.Query {
	return memstore.Query{K: mc.TopK, Threshold: float32(mc.Threshold), Order: memstore.OrderByScoreStable}
}

// Built-in embedders of MemoryConfig.Embedder (anything else is a GGUF path;
// see OpenEmbedder).
const (
	EmbedderHash   = "hash"
	EmbedderPolicy = "policy"
)
