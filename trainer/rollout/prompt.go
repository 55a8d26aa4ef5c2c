package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/empo2/empo2/llama"
)

// The one prompt format of empo2: rollouts, eval, SFT demonstrations and SFT
// data all build their chats with Messages and tokenize them with a
// Renderer, so that what a model is trained on is token for token what it
// sees when it acts.
//
// Chat layout (Messages):
//
//	system:    PromptConfig.System (DefaultSystem) + the action-format rule
//	user:      "Task: <description>\n\n<first observation>"
//	assistant: response of turn 1 (naive: the action; cot: reasoning + <action>…</action>)
//	user:      observation after turn 1
//	…          (history "last-k": only the last k turns, and a note in the first user message)
//	[tips]:    "\n\n<memory>\n<header>\n- tip…\n</memory>" at the end of the LAST user message
//
// Token layout (Renderer): the chat template is rendered once with every
// message content replaced by a sentinel; the template text between
// sentinels is tokenized with special tokens parsed, each content on its own
// without (so an observation cannot smuggle in control tokens), and a tip
// block as a span of its own. Hence
//   - cutting ChatTokens.Tips out of the tokens gives exactly the tokens of
//     the same chat rendered with no tips (off-policy updates);
//   - ChatTokens.Assistant spans are each assistant content plus the
//     template's end-of-turn token (SFT loss spans);
//   - with full history, the prompt of turn t+1 starts with the tip-free
//     prompt of turn t followed by its response tokens (KV reuse, packing).

// Errors of this file.
var (
	// ErrPrompt: an invalid PromptConfig or chat.
	ErrPrompt = errors.New("trainer: invalid prompt")
	// ErrTemplate: the model's chat template cannot be split into segments
	// (it rewrites or reorders message contents, or rejects a role).
	ErrTemplate = errors.New("trainer: unsupported chat template")
)

// DefaultSystem is the system text used when PromptConfig.System is empty.
const DefaultSystem = "You are an agent in a text-based environment. Each turn you read the task and the latest " +
	"observation, then reply with the next action that brings you closer to completing the task. " +
	"Explore places you have not seen yet when you are stuck, and do not repeat actions that did not help."

// ActionFormat is how a response carries its action.
type ActionFormat string

// Action formats.
const (
	FormatNaive ActionFormat = "naive" // the response is one action line
	FormatCoT   ActionFormat = "cot"   // reasoning, then <action>…</action>
)

// Valid reports whether f is a known format.
func (f ActionFormat) Valid() bool { return f == FormatNaive || f == FormatCoT }

// History is which turns the prompt shows.
type History string

// History modes.
const (
	HistoryFull History = "full"   // every turn
	HistoryLast History = "last-k" // the last PromptConfig.HistoryK turns
)

// Valid reports whether h is a known mode.
func (h History) Valid() bool { return h == HistoryFull || h == HistoryLast }

// Action tags of the "cot" format.
const (
	ActionOpen  = "<action>"
	ActionClose = "</action>"
)

// PromptConfig configures the prompt; its keys are part of the rollout
// section (Config). Zero fields take their defaults in Normalize (a zero
// MaxActionTokens: 32 naive, 128 cot).
type PromptConfig struct {
	MaxActionTokens int          `yaml:"max_action_tokens" doc:"max tokens of one action (response)"`
	History         History      `yaml:"history" doc:"history in the prompt: full | last-k"`
	HistoryK        int          `yaml:"history_k" doc:"turns kept with history last-k"`
	ActionFormat    ActionFormat `yaml:"action_format" doc:"naive (one action line) | cot (reasoning, then <action>…</action>)"`
	System          string       `yaml:"system" doc:"system text; empty = the built-in one"`
}

// DefaultPromptConfig is full history, naive actions, 32 tokens per action.
func DefaultPromptConfig() PromptConfig {
	return PromptConfig{History: HistoryFull, HistoryK: 4, ActionFormat: FormatNaive, MaxActionTokens: 32}
}

// Normalize fills empty fields with their defaults and validates pc.
func (pc PromptConfig) Normalize() (PromptConfig, error) {
	if pc.History == "" {
		pc.History = HistoryFull
	}
	if pc.ActionFormat == "" {
		pc.ActionFormat = FormatNaive
	}
	if pc.MaxActionTokens == 0 {
		pc.MaxActionTokens = 32
		if pc.ActionFormat == FormatCoT {
			pc.MaxActionTokens = 128
		}
	}
	switch {
	case !pc.History.Valid():
		return pc, fmt.Errorf("%w: history %q (want %s or %s)", ErrPrompt, pc.History, HistoryFull, HistoryLast)
	case pc.History == HistoryLast && pc.HistoryK < 1:
		return pc, fmt.Errorf("%w: history last-k needs history_k >= 1, got %d", ErrPrompt, pc.HistoryK)
	case !pc.ActionFormat.Valid():
		return pc, fmt.Errorf("%w: action_format %q (want %s or %s)", ErrPrompt, pc.ActionFormat, FormatNaive, FormatCoT)
	case pc.MaxActionTokens < 0 || pc.MaxActionTokens > 1<<16:
		return pc, fmt.Errorf("%w: max_action_tokens %d", ErrPrompt, pc.MaxActionTokens)
	case strings.IndexByte(pc.System, 0) >= 0:
		return pc, fmt.Errorf("%w: system text contains a NUL byte", ErrPrompt)
	}
	return pc, nil
}

// SystemText is the system message: the system text and the rule of the
// action format.
func (pc PromptConfig) SystemText() string {
	s := pc.System
	if s == "" {
		s = DefaultSystem
	}
	if pc.ActionFormat == FormatCoT {
		return s + "\n\nFirst think briefly about the situation, then give exactly one action between " +
			ActionOpen + " and " + ActionClose + ", for example " + ActionOpen + "look around" + ActionClose + "."
	}
	return s + "\n\nReply with exactly one action on a single line and nothing else, for example: look around"
}

// Turn is one completed step: the assistant's response (naive: the action
// line; cot: the whole response with reasoning and tags) and the
// observation the environment answered.
type Turn struct{ Action, Observation string }

// Messages builds the chat before the next action: system; user (task and
// first observation); then assistant(action)/user(observation) per turn
// (the last k with history "last-k"); tips, when non-empty (a FormatTips
// block), at the end of the last user message after a blank line. Memory
// markers in the task and observations are neutralized so that the tip
// block is the only one.
func Messages(pc PromptConfig, taskDesc, firstObs string, turns []Turn, tips string) []llama.Message {
	first := "Task: " + neutralize(strings.TrimSpace(taskDesc)) + "\n\n" + neutralize(firstObs)
	if pc.History == HistoryLast && pc.HistoryK >= 0 && len(turns) > pc.HistoryK {
		skipped := len(turns) - pc.HistoryK
		first += "\n\n(" + strconv.Itoa(skipped) + " earlier steps are not shown.)"
		turns = turns[skipped:]
	}
	msgs := make([]llama.Message, 0, 2+2*len(turns))
	msgs = append(msgs,
		llama.Message{Role: "system", Content: pc.SystemText()},
		llama.Message{Role: "user", Content: first})
	for _, t := range turns {
		msgs = append(msgs,
			llama.Message{Role: "assistant", Content: t.Action},
			llama.Message{Role: "user", Content: neutralize(t.Observation)})
	}
	if tips != "" {
		last := &msgs[len(msgs)-1]
		last.Content += TipSep + tips
	}
	return msgs
}

// TipMessages is the chat that asks the policy for its tip after an
// episode: Messages with no tips, TipRequest appended to the last user
// message (after the final observation).
func TipMessages(pc PromptConfig, taskDesc, firstObs string, turns []Turn) []llama.Message {
	msgs := Messages(pc, taskDesc, firstObs, turns, "")
	msgs[len(msgs)-1].Content += "\n\n" + TipRequest
	return msgs
}

// ParseAction extracts the action from a response: naive, its first
// non-empty line (an "Action:" prefix and surrounding quotes trimmed); cot,
// the text of the last complete <action>…</action>. ok is false when there
// is none.
func ParseAction(pc PromptConfig, response string) (action string, ok bool) {
	if pc.ActionFormat == FormatCoT {
		end := strings.LastIndex(response, ActionClose)
		if end < 0 {
			return "", false
		}
		start := strings.LastIndex(response[:end], ActionOpen)
		if start < 0 {
			return "", false
		}
		a := strings.Join(strings.Fields(response[start+len(ActionOpen):end]), " ")
		return a, a != ""
	}
	for _, line := range strings.Split(response, "\n") {
		line = strings.TrimSpace(line)
		if len(line) >= 7 && strings.EqualFold(line[:7], "action:") {
			line = strings.TrimSpace(line[7:])
		}
		line = strings.TrimSpace(strings.Trim(line, "\"'`"))
		if line != "" {
			return strings.Join(strings.Fields(line), " "), true
		}
	}
	return "", false
}

// ChatTokens is a tokenized chat.
type ChatTokens struct {
	Tokens    []int32
	Assistant [][2]int // [start,end) token spans of assistant contents incl. their end-of-turn token (SFT loss spans)
	Tips      [][2]int // [start,end) token spans of tip blocks
}

// WithoutTips returns the tokens with every tip span cut out.
func (ct ChatTokens) WithoutTips() []int32 { return cutSpans(ct.Tokens, ct.Tips) }

// cutSpans returns toks without the sorted, disjoint spans.
func cutSpans(toks []int32, spans [][2]int) []int32 {
	if len(spans) == 0 {
		return append([]int32(nil), toks...)
	}
	out := make([]int32, 0, len(toks))
	prev := 0
	for _, s := range spans {
		out = append(out, toks[prev:s[0]]...)
		prev = s[1]
	}
	return append(out, toks[prev:]...)
}

// Renderer tokenizes chats exactly as the rollouts do. It is safe for
// concurrent use.
type Renderer struct {
	m  *llama.Model
	pc PromptConfig

	mu     sync.Mutex
	pieces map[pieceKey][]int32 // tokenized template pieces
}

type pieceKey struct {
	text  string
	first bool
}

// sentinel stands for message i's content while the template is rendered
// (control characters that no template trims or escapes).
func sentinel(i int) string { return "\x1e" + strconv.Itoa(i) + "\x1f" }

// NewRenderer makes a renderer for model m. It checks that m's chat
// template can be split into segments (a probe chat with every role), and
// fails with ErrTemplate otherwise (a model without a template, or one that
// llama.cpp's built-in templates do not cover).
func NewRenderer(m *llama.Model, pc PromptConfig) (*Renderer, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil model", ErrPrompt)
	}
	pc, err := pc.Normalize()
	if err != nil {
		return nil, err
	}
	r := &Renderer{m: m, pc: pc, pieces: map[pieceKey][]int32{}}
	probe := Messages(pc, "probe", "probe", []Turn{{Action: "a", Observation: "o"}}, "")
	if _, err := r.Tokens(probe, true); err != nil {
		return nil, err
	}
	return r, nil
}

// Config is the renderer's (normalized) prompt configuration.
func (r *Renderer) Config() PromptConfig { return r.pc }

// Model is the renderer's model.
func (r *Renderer) Model() *llama.Model { return r.m }

// Tokens tokenizes a chat; with addGenerationPrompt it ends with the
// opening of an assistant turn (the prompt for the next response).
func (r *Renderer) Tokens(msgs []llama.Message, addGenerationPrompt bool) (ChatTokens, error) {
	return r.TokensWithResponses(msgs, nil, addGenerationPrompt)
}

// TokensWithResponses is Tokens where the content of the j-th assistant
// message is given as tokens (responses[j], the sampled tokens without a
// final end-of-generation token) instead of being tokenized from its text,
// so that a history holds exactly what the policy sampled. A nil or missing
// responses[j] tokenizes the message's text.
func (r *Renderer) TokensWithResponses(msgs []llama.Message, responses [][]int32, addGenerationPrompt bool) (ChatTokens, error) {
	var ct ChatTokens
	if len(msgs) == 0 {
		return ct, fmt.Errorf("%w: empty chat", ErrPrompt)
	}
	sent := make([]llama.Message, len(msgs))
	for i, msg := range msgs {
		if strings.ContainsAny(msg.Role, "\x00\x1e\x1f") {
			return ct, fmt.Errorf("%w: message %d: bad role %q", ErrPrompt, i, msg.Role)
		}
		sent[i] = llama.Message{Role: msg.Role, Content: sentinel(i)}
	}
	text, err := r.m.ApplyChatTemplate(sent, addGenerationPrompt)
	if err != nil {
		return ct, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	pos, asst := 0, 0
	openAsst := -1 // index in ct.Assistant of a span waiting for its end-of-turn token
	for i, msg := range msgs {
		s := sentinel(i)
		j := strings.Index(text[pos:], s)
		if j < 0 {
			return ct, fmt.Errorf("%w: the template drops or reorders message %d (%s)", ErrTemplate, i, msg.Role)
		}
		if err := r.appendPiece(&ct, text[pos:pos+j], pos == 0, &openAsst); err != nil {
			return ct, err
		}
		pos += j + len(s)
		start := len(ct.Tokens)
		switch msg.Role {
		case "assistant":
			if asst < len(responses) && responses[asst] != nil {
				if err := r.checkTokens(responses[asst]); err != nil {
					return ct, err
				}
				ct.Tokens = append(ct.Tokens, responses[asst]...)
			} else if err := r.appendText(&ct, msg.Content); err != nil {
				return ct, err
			}
			asst++
			ct.Assistant = append(ct.Assistant, [2]int{start, len(ct.Tokens)})
			openAsst = len(ct.Assistant) - 1
		case "user":
			base, block := splitTips(msg.Content)
			if err := r.appendText(&ct, base); err != nil {
				return ct, err
			}
			if block != "" {
				t0 := len(ct.Tokens)
				if err := r.appendText(&ct, block); err != nil {
					return ct, err
				}
				ct.Tips = append(ct.Tips, [2]int{t0, len(ct.Tokens)})
			}
		default:
			if err := r.appendText(&ct, msg.Content); err != nil {
				return ct, err
			}
		}
	}
	if strings.Contains(text[pos:], "\x1e") {
		return ct, fmt.Errorf("%w: the template repeats message contents", ErrTemplate)
	}
	if err := r.appendPiece(&ct, text[pos:], false, &openAsst); err != nil {
		return ct, err
	}
	return ct, nil
}

// splitTips splits a user message's content into its text and a trailing
// tip block (TipSep + TipsBegin … TipsEnd), if any.
func splitTips(content string) (base, block string) {
	if !strings.HasSuffix(content, TipsEnd) {
		return content, ""
	}
	i := strings.LastIndex(content, TipSep+TipsBegin)
	if i < 0 {
		return content, ""
	}
	return content[:i], content[i:]
}

// appendText appends the tokens of plain text (special tokens not parsed).
func (r *Renderer) appendText(ct *ChatTokens, s string) error {
	if s == "" {
		return nil
	}
	toks, err := r.m.Tokenize(s, false, false)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPrompt, err)
	}
	ct.Tokens = append(ct.Tokens, toks...)
	return nil
}

// appendPiece appends a template piece (special tokens parsed; BOS added
// for the first piece when the model wants one). When an assistant span is
// open and the piece starts with an end-of-generation token, the span is
// extended over it.
func (r *Renderer) appendPiece(ct *ChatTokens, piece string, first bool, openAsst *int) error {
	if strings.ContainsAny(piece, "\x1e\x1f") {
		return fmt.Errorf("%w: the template alters message contents", ErrTemplate)
	}
	k := pieceKey{piece, first}
	r.mu.Lock()
	toks, ok := r.pieces[k]
	r.mu.Unlock()
	if !ok {
		var err error
		if toks, err = r.m.Tokenize(piece, first, true); err != nil {
			return fmt.Errorf("%w: %w", ErrTemplate, err)
		}
		r.mu.Lock()
		r.pieces[k] = toks
		r.mu.Unlock()
	}
	if *openAsst >= 0 {
		if len(toks) > 0 && r.m.IsEOG(toks[0]) {
			ct.Assistant[*openAsst][1]++
		}
		*openAsst = -1
	}
	ct.Tokens = append(ct.Tokens, toks...)
	return nil
}

func (r *Renderer) checkTokens(toks []int32) error {
	n := int32(r.m.NVocab())
	for i, t := range toks {
		if t < 0 || t >= n {
			return fmt.Errorf("%w: response token %d at %d out of vocabulary", ErrPrompt, t, i)
		}
	}
	return nil
}

// EndOfTurn is the template's end-of-turn token after an assistant
// message (ChatML: <|im_end|>), or -1 when the template has none.
func (r *Renderer) EndOfTurn() int32 {
	ct, err := r.Tokens([]llama.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "a"}}, false)
	if err != nil || len(ct.Assistant) == 0 {
		return -1
	}
	sp := ct.Assistant[len(ct.Assistant)-1]
	if sp[1] > 0 && sp[1] <= len(ct.Tokens) && r.m.IsEOG(ct.Tokens[sp[1]-1]) && sp[1]-sp[0] > 0 {
		// the span grew over the end-of-turn token only when one follows
		if a, _ := r.m.Tokenize("a", false, false); sp[1]-sp[0] == len(a)+1 {
			return ct.Tokens[sp[1]-1]
		}
	}
	return -1
}
