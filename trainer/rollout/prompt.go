package rollout

import (
	"errors"
	"fmt"
	"slices"
	"sort"
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
//	user:      "Task: <description>\n\n<first observation>"[tips of turn 1]
//	assistant: response of turn 1 (naive: the action; cot: reasoning + <action>…</action>)
//	user:      observation after turn 1[tips of turn 2]
//	…          (history "last-k": only the last k turns, and a note in the first user message)
//	[tips]:    "\n\n<memory>\n<header>\n- tip…\n</memory>" at the end of the user
//	           message before the action they were retrieved for (Turn.Tips; the
//	           next action's tips end the last user message)
//
// Token layout (Renderer): the chat template is rendered once with every
// message content replaced by a sentinel (Qwen3's template: with thinking
// off, the empty think block after every assistant opening). The template
// text is cut at its control tokens (<|im_start|>, <|im_end|>, …), which are
// added as tokens; every stretch of text between two control tokens — the
// template text there and the system or user content with its tips — is
// tokenized whole, as the model's own tokenizer tokenizes the whole
// rendered chat (llama.cpp and Hugging Face tokenizers split text at
// special tokens first), but with special tokens not parsed in contents (an
// observation cannot smuggle in control tokens). Assistant contents are
// tokenized on their own (or given as the sampled tokens), since the model
// generated them after the prompt. Hence
//   - a message with tips is tokenized as one text: "…kitchen." + "\n\n<memory>"
//     gives Qwen's ".\n\n" token, never "." + "\n\n";
//   - the chat without tips is its own rendering (Tokens of the chat built
//     with no tips); ChatTokens.Tips locates the tip blocks, and when every
//     block starts and ends at a token boundary (TipsAligned) cutting them
//     out gives exactly those tokens;
//   - ChatTokens.Assistant spans are each assistant content plus the
//     template's end-of-turn token (SFT loss spans);
//   - with full history the prompt of turn t+1 starts with the prompt of
//     turn t (its tips included when every turn keeps its tips) followed by
//     its response tokens: messages are delimited by control tokens, so an
//     earlier message tokenizes the same whatever follows (KV reuse,
//     packing).

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
	MaxActionTokens int          `yaml:"max_action_tokens" doc:"max tokens of one action (response)" range:"[0,65536]"`
	History         History      `yaml:"history" doc:"history in the prompt: full | last-k"`
	HistoryK        int          `yaml:"history_k" doc:"turns kept with history last-k" range:"[0,1e6]"`
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
// line; cot: the whole response with reasoning and tags), the observation
// the environment answered, and Tips, the tip block (FormatTips) the
// policy was shown when it chose this action ("" none; set when every turn
// keeps its tips, memory.tips_in: every-turn).
type Turn struct{ Action, Observation, Tips string }

// Messages builds the chat before the next action: system; user (task and
// first observation); then assistant(action)/user(observation) per turn
// (the last k with history "last-k"). Each shown turn's Tips end the user
// message just before its assistant message, and tips (the next action's
// block), when non-empty, end the last user message; a block follows its
// message's text after a blank line (TipSep). Memory markers in the task
// and observations are neutralized so that the tip blocks are the only
// ones.
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
		addTips(&msgs[len(msgs)-1], t.Tips)
		msgs = append(msgs,
			llama.Message{Role: "assistant", Content: t.Action},
			llama.Message{Role: "user", Content: neutralize(t.Observation)})
	}
	addTips(&msgs[len(msgs)-1], tips)
	return msgs
}

// addTips appends a tip block to a user message after a blank line.
func addTips(m *llama.Message, block string) {
	if block != "" {
		m.Content += TipSep + block
	}
}

// TipMessages is the chat that asks the policy for its tip after an
// episode (EMPO² tip writing): the episode's chat as the policy saw it
// (Messages, with the tips of every turn that kept them; the final
// observation has none), then TipRequest as a new user message.
func TipMessages(pc PromptConfig, taskDesc, firstObs string, turns []Turn) []llama.Message {
	msgs := Messages(pc, taskDesc, firstObs, turns, "")
	return append(msgs, llama.Message{Role: "user", Content: TipRequest})
}

// ConversationKey is the retrieval key of a chat under memory.key
// "conversation" (the EMPO² reference code's key): every message but the
// system one as "role: content", tips removed, joined by single spaces.
// Every conversation of one task variation begins with the same task text.
func ConversationKey(msgs []llama.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		if m.Role == "system" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(StripTips(m.Content))
	}
	return b.String()
}

// Think-block markers of Qwen3-style models. A response's think block is
// never its action (ParseAction) nor part of a tip (CleanTip).
const (
	ThinkOpen  = "<think>"
	ThinkClose = "</think>"
)

// stripThink removes what a thinking model put in a think block: the text
// up to the last ThinkClose (a block opened by the prompt or the response),
// and an unterminated ThinkOpen with everything after it.
func stripThink(s string) string {
	if i := strings.LastIndex(s, ThinkClose); i >= 0 {
		s = s[i+len(ThinkClose):]
	}
	if i := strings.Index(s, ThinkOpen); i >= 0 {
		s = s[:i]
	}
	return s
}

// ParseAction extracts the action from a response, a think block
// (<think>…</think>) removed first: naive, its first non-empty line (an
// "Action:" prefix and surrounding quotes trimmed); cot, the text of the
// last complete <action>…</action>. ok is false when there is none.
func ParseAction(pc PromptConfig, response string) (action string, ok bool) {
	response = stripThink(response)
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
	// Tips are the [start,end) token spans that hold the tip blocks (each
	// with the blank line before it): the first token holding a byte of the
	// block to the last one. TipsAligned: every block starts and ends at a
	// token boundary, so that cutting Tips out (WithoutTips) gives exactly
	// the tokens of the chat rendered without tips; otherwise a token also
	// holds text around a block (Qwen's ".\n\n") and only that rendering is
	// exact.
	Tips        [][2]int
	TipsAligned bool
}

// WithoutTips returns the tokens with every tip span cut out (exactly the
// chat rendered without tips when TipsAligned).
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
	// think is inserted after every assistant opening (Qwen3's template
	// with thinking off: the empty think block); "" for other templates.
	think string

	mu      sync.Mutex
	pieces  map[pieceKey][]pieceItem // template pieces cut at control tokens
	control map[int32]bool           // tokens that only special-token parsing makes
	frags   map[string]fragment      // tokenized text between control tokens (fragCache)
}

// fragment is a text tokenized on its own, with the byte offset of every
// token (off[k] = start of token k, off[len] = the text's length; nil
// until a tip block in it must be located).
type fragment struct {
	toks []int32
	off  []int
}

// fragCache bounds the fragments a Renderer keeps: an episode's earlier
// messages come back in every later prompt, so most are tokenized once;
// the cache is emptied when it holds this many.
const fragCache = 1 << 13

type pieceKey struct {
	text  string
	first bool
}

// pieceItem is a control token (isTok) or template text between two.
type pieceItem struct {
	tok   int32
	text  string
	isTok bool
}

// Qwen3-style templates (detected by their "enable_thinking" switch): with
// thinking off the generation prompt opens the assistant turn with an
// empty think block. empo2 keeps the block in every assistant turn of the
// history too (Qwen3's own template drops it from earlier turns), so that
// each prompt extends the previous one with exactly the tokens the policy
// saw when it answered.
const (
	thinkingSwitch   = "enable_thinking"
	assistantOpening = "<|im_start|>assistant\n"
	thinkOff         = ThinkOpen + "\n\n" + ThinkClose + "\n\n"
)

// sentinel stands for message i's content while the template is rendered
// (control characters that no template trims or escapes).
func sentinel(i int) string { return "\x1e" + strconv.Itoa(i) + "\x1f" }

// NewRenderer makes a renderer for model m. It checks that m's chat
// template can be split into segments (a probe chat with every role), and
// fails with ErrTemplate otherwise (a model without a template, or one that
// llama.cpp's built-in templates do not cover). A Qwen3 template (one with
// the enable_thinking switch) renders with thinking off.
func NewRenderer(m *llama.Model, pc PromptConfig) (*Renderer, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil model", ErrPrompt)
	}
	pc, err := pc.Normalize()
	if err != nil {
		return nil, err
	}
	r := &Renderer{m: m, pc: pc, pieces: map[pieceKey][]pieceItem{}, control: map[int32]bool{}, frags: map[string]fragment{}}
	if tmpl, err := m.ChatTemplate(); err == nil && strings.Contains(tmpl, thinkingSwitch) && strings.Contains(tmpl, ThinkOpen) {
		r.think = thinkOff
	}
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

// ThinkingOff reports whether the template is Qwen3's, rendered with
// thinking off (an empty think block opens every assistant turn).
func (r *Renderer) ThinkingOff() bool { return r.think != "" }

// Text is the chat rendered as text, as the renderer tokenizes it: the
// template's rendering, with the empty think block of a Qwen3 template
// after every assistant opening. Tokenizing it whole (special tokens
// parsed) gives Tokens, as long as no content holds special-token text.
func (r *Renderer) Text(msgs []llama.Message, addGenerationPrompt bool) (string, error) {
	text, err := r.m.ApplyChatTemplate(msgs, addGenerationPrompt)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	return r.withThink(text), nil
}

func (r *Renderer) withThink(text string) string {
	if r.think == "" {
		return text
	}
	return strings.ReplaceAll(text, assistantOpening, assistantOpening+r.think)
}

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
	b := chatBuilder{r: r, openAsst: -1}
	b.ct.TipsAligned = true
	if len(msgs) == 0 {
		return b.ct, fmt.Errorf("%w: empty chat", ErrPrompt)
	}
	sent := make([]llama.Message, len(msgs))
	for i, msg := range msgs {
		if strings.ContainsAny(msg.Role, "\x00\x1e\x1f") {
			return b.ct, fmt.Errorf("%w: message %d: bad role %q", ErrPrompt, i, msg.Role)
		}
		sent[i] = llama.Message{Role: msg.Role, Content: sentinel(i)}
	}
	text, err := r.Text(sent, addGenerationPrompt)
	if err != nil {
		return b.ct, err
	}
	pos, asst := 0, 0
	for i, msg := range msgs {
		s := sentinel(i)
		j := strings.Index(text[pos:], s)
		if j < 0 {
			return b.ct, fmt.Errorf("%w: the template drops or reorders message %d (%s)", ErrTemplate, i, msg.Role)
		}
		if err := b.template(text[pos:pos+j], pos == 0); err != nil {
			return b.ct, err
		}
		pos += j + len(s)
		switch msg.Role {
		case "assistant":
			// the policy generated this content after the prompt: its
			// tokens stand alone
			if err := b.flush(); err != nil {
				return b.ct, err
			}
			start := len(b.ct.Tokens)
			if asst < len(responses) && responses[asst] != nil {
				if err := r.checkTokens(responses[asst]); err != nil {
					return b.ct, err
				}
				b.ct.Tokens = append(b.ct.Tokens, responses[asst]...)
			} else if err := b.text(msg.Content); err != nil {
				return b.ct, err
			}
			asst++
			b.ct.Assistant = append(b.ct.Assistant, [2]int{start, len(b.ct.Tokens)})
			b.openAsst = len(b.ct.Assistant) - 1
		case "user":
			base, block := splitTips(msg.Content)
			b.raw.WriteString(base)
			if block != "" {
				a := b.raw.Len()
				b.raw.WriteString(block)
				b.marks = append(b.marks, [2]int{a, b.raw.Len()})
			}
		default:
			b.raw.WriteString(msg.Content)
		}
	}
	if strings.Contains(text[pos:], "\x1e") {
		return b.ct, fmt.Errorf("%w: the template repeats message contents", ErrTemplate)
	}
	if err := b.template(text[pos:], false); err != nil {
		return b.ct, err
	}
	if err := b.flush(); err != nil {
		return b.ct, err
	}
	return b.ct, nil
}

// chatBuilder accumulates a chat's tokens: raw holds the text since the
// last control token (or assistant content), tokenized whole by flush.
type chatBuilder struct {
	r        *Renderer
	ct       ChatTokens
	raw      strings.Builder
	marks    [][2]int // byte spans of tip blocks in raw
	openAsst int      // index in ct.Assistant of a span waiting for its end-of-turn token
}

// template adds a template piece: its text goes to raw, its control tokens
// end raw (flush) and are added as tokens. When an assistant span is open
// and the piece starts with an end-of-generation token, the span is
// extended over it.
func (b *chatBuilder) template(piece string, first bool) error {
	items, err := b.r.split(piece, first)
	if err != nil {
		return err
	}
	for k, it := range items {
		if b.openAsst >= 0 {
			if k == 0 && it.isTok && b.r.m.IsEOG(it.tok) {
				b.ct.Assistant[b.openAsst][1]++
			}
			b.openAsst = -1
		}
		if !it.isTok {
			b.raw.WriteString(it.text)
			continue
		}
		if err := b.flush(); err != nil {
			return err
		}
		b.ct.Tokens = append(b.ct.Tokens, it.tok)
	}
	return nil
}

// text appends the tokens of a text of its own (special tokens not parsed).
func (b *chatBuilder) text(s string) error {
	if s == "" {
		return nil
	}
	toks, err := b.r.m.Tokenize(s, false, false)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPrompt, err)
	}
	b.ct.Tokens = append(b.ct.Tokens, toks...)
	return nil
}

// flush tokenizes raw as one text (special tokens not parsed) and maps the
// tip blocks in it to token spans.
func (b *chatBuilder) flush() error {
	s := b.raw.String()
	b.raw.Reset()
	marks := b.marks
	b.marks = nil
	if s == "" {
		return nil
	}
	base := len(b.ct.Tokens)
	f, err := b.r.fragment(s, len(marks) > 0)
	if err != nil {
		return err
	}
	b.ct.Tokens = append(b.ct.Tokens, f.toks...)
	off := f.off
	for _, m := range marks {
		st := sort.Search(len(off), func(k int) bool { return off[k] > m[0] }) - 1 // token holding byte m[0]
		en := sort.Search(len(off), func(k int) bool { return off[k] >= m[1] })    // first token past the block
		if off[st] != m[0] || off[en] != m[1] {
			b.ct.TipsAligned = false
		}
		b.ct.Tips = append(b.ct.Tips, [2]int{base + st, base + en})
	}
	return nil
}

// fragment tokenizes a text on its own (special tokens not parsed), with
// the tokens' byte offsets when withOff; cached.
func (r *Renderer) fragment(s string, withOff bool) (fragment, error) {
	r.mu.Lock()
	f, ok := r.frags[s]
	r.mu.Unlock()
	if ok && (f.off != nil || !withOff) {
		return f, nil
	}
	if !ok {
		toks, err := r.m.Tokenize(s, false, false)
		if err != nil {
			return f, fmt.Errorf("%w: %w", ErrPrompt, err)
		}
		f.toks = toks
	}
	if withOff {
		// pieces are the tokens' bytes
		off := make([]int, len(f.toks)+1)
		for k, t := range f.toks {
			p, err := r.m.TokenPiece(t)
			if err != nil {
				return f, fmt.Errorf("%w: %w", ErrPrompt, err)
			}
			off[k+1] = off[k] + len(p)
		}
		if off[len(f.toks)] != len(s) {
			return f, fmt.Errorf("%w: the tokens of a message do not spell its %d bytes (%d): tip blocks cannot be located", ErrTemplate, len(s), off[len(f.toks)])
		}
		f.off = off
	}
	r.mu.Lock()
	if len(r.frags) >= fragCache {
		clear(r.frags)
	}
	r.frags[s] = f
	r.mu.Unlock()
	return f, nil
}

// split cuts a template piece at its control tokens (cached): tokenized
// with special tokens parsed (and BOS added for the first piece when the
// model wants one), each control token is located in the text; the text
// between is kept as text, to be tokenized with the content next to it.
func (r *Renderer) split(piece string, first bool) ([]pieceItem, error) {
	if strings.ContainsAny(piece, "\x1e\x1f") {
		return nil, fmt.Errorf("%w: the template alters message contents", ErrTemplate)
	}
	k := pieceKey{piece, first}
	r.mu.Lock()
	items, ok := r.pieces[k]
	r.mu.Unlock()
	if ok {
		return items, nil
	}
	toks, err := r.m.Tokenize(piece, false, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	if first { // BOS (or whatever the model adds in front of a text)
		full, err := r.m.Tokenize(piece, true, true)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
		}
		n := len(full) - len(toks)
		if n < 0 || !slices.Equal(full[n:], toks) {
			return nil, fmt.Errorf("%w: the model's added tokens are not a prefix of the first template piece", ErrTemplate)
		}
		for _, t := range full[:n] {
			items = append(items, pieceItem{tok: t, isTok: true})
		}
	}
	cur := 0
	for _, t := range toks {
		ctl, err := r.isControl(t)
		if err != nil {
			return nil, err
		}
		if !ctl {
			continue
		}
		p, err := r.m.TokenPiece(t)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
		}
		j := strings.Index(piece[cur:], p)
		if j < 0 || p == "" {
			return nil, fmt.Errorf("%w: control token %d (%q) not found in the template text", ErrTemplate, t, p)
		}
		if j > 0 {
			items = append(items, pieceItem{text: piece[cur : cur+j]})
		}
		items = append(items, pieceItem{tok: t, isTok: true})
		cur += j + len(p)
	}
	if cur < len(piece) {
		items = append(items, pieceItem{text: piece[cur:]})
	}
	r.mu.Lock()
	r.pieces[k] = items
	r.mu.Unlock()
	return items, nil
}

// isControl reports whether tok is a token that only special-token parsing
// makes (its text, tokenized as plain text, is not tok itself), cached.
func (r *Renderer) isControl(tok int32) (bool, error) {
	r.mu.Lock()
	c, ok := r.control[tok]
	r.mu.Unlock()
	if ok {
		return c, nil
	}
	p, err := r.m.TokenPiece(tok)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	plain, err := r.m.Tokenize(p, false, false)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	c = !(len(plain) == 1 && plain[0] == tok)
	r.mu.Lock()
	r.control[tok] = c
	r.mu.Unlock()
	return c, nil
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
