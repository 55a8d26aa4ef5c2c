package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/llama"
)

// Flags shared by generate and score (llama-backed commands).
var (
	llmModelFlag     = &cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "model GGUF `FILE`", Required: true}
	llmLoraFlag      = &cli.StringFlag{Name: "lora", Usage: "LoRA adapter GGUF `FILE` (llama.cpp format)"}
	llmLoraScaleFlag = &cli.Float64Flag{Name: "lora-scale", Usage: "adapter scale (effective scale is scale*alpha/rank)", Value: 1}
	llmPromptFlag    = &cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "prompt `TEXT` (special tokens such as <|im_start|> are parsed)", Required: true}
	llmChatFlag      = &cli.BoolFlag{Name: "chat", Usage: "wrap the prompt as a user message in the model's chat template, ending with the assistant turn"}
	llmSystemFlag    = &cli.StringFlag{Name: "system", Usage: "system message for --chat"}
	llmThreadsFlag   = &cli.IntFlag{Name: "threads", Usage: "CPU threads; more than the cores is slower (warned)", DefaultText: "all cores"}
	llmCtxFlag       = &cli.IntFlag{Name: "ctx", Usage: "tokens per sequence (prompt + output); 0: min(training context, 2048)"}
	llmGPULayersFlag = &cli.IntFlag{Name: "gpu-layers", Usage: "layers to offload to a GPU backend (-1: all)"}
	llmJSONFlag      = &cli.BoolFlag{Name: "json", Usage: "print JSON"}
)

var (
	genMaxTokensFlag = &cli.IntFlag{Name: "max-tokens", Usage: "tokens to generate per sequence", Value: 128}
	genTempFlag      = &cli.Float64Flag{Name: "temperature", Aliases: []string{"t"}, Usage: "sampling temperature (0: greedy)", Value: 0.8}
	genSeedFlag      = &cli.Uint64Flag{Name: "seed", Usage: "sampling seed (sequence i uses (seed, i)); a random seed is logged at info level when unset (as llama.cpp's tools do)", DefaultText: "random"}
	genTopPFlag      = &cli.Float64Flag{Name: "top-p", Usage: "nucleus sampling threshold (1: off)", Value: 1}
	genTopKFlag      = &cli.IntFlag{Name: "top-k", Usage: "keep the K most likely tokens (0: off)"}
	genMinPFlag      = &cli.Float64Flag{Name: "min-p", Usage: "keep tokens with p >= min-p * p(top) (0: off)"}
	genNFlag         = &cli.IntFlag{Name: "sequences", Usage: "sequences sampled from the prompt, decoded as one batch (1..256)", Value: 1}
	genStopFlag      = &cli.StringSliceFlag{Name: "stop", Usage: "stop `STRING` (repeatable)"}
	genIgnoreEOGFlag = &cli.BoolFlag{Name: "ignore-eog", Usage: "keep sampling after end-of-generation tokens"}
)

func init() {
	register(&cli.Command{
		Name:  "generate",
		Usage: "sample text from a GGUF model (optionally with a LoRA adapter) through llama.cpp",
		Description: "Decodes the prompt once and samples --sequences sequences from it in one batch.\n" +
			"Examples:\n" +
			"  empo2 generate --model tiny.gguf --prompt 'Once upon a time' --max-tokens 32 --seed 1\n" +
			"  empo2 generate --model m.gguf --lora a.gguf --chat --prompt 'Hi!' --sequences 4 --json",
		Flags: []cli.Flag{llmModelFlag, llmLoraFlag, llmLoraScaleFlag, llmPromptFlag, llmChatFlag, llmSystemFlag,
			genMaxTokensFlag, genTempFlag, genSeedFlag, genTopPFlag, genTopKFlag, genMinPFlag, genNFlag, genStopFlag, genIgnoreEOGFlag,
			llmThreadsFlag, llmCtxFlag, llmGPULayersFlag, llmJSONFlag},
		Action: generateAction,
	})
}

// llmSession is a model, a context and an optional adapter opened from the
// shared flags.
type llmSession struct {
	model   *llama.Model
	ctx     *llama.Context
	adapter *llama.Adapter
}

func (s *llmSession) Close() {
	s.ctx.Close()
	s.adapter.Close()
	s.model.Close()
}

func openLLM(c *cli.Context, nSeq int) (*llmSession, error) {
	if err := checkThreads(c); err != nil {
		return nil, err
	}
	m, err := llama.LoadModel(c.String(llmModelFlag.Name), llama.ModelParams{GPULayers: c.Int(llmGPULayersFlag.Name)})
	if err != nil {
		return nil, err
	}
	s := &llmSession{model: m}
	threads := c.Int(llmThreadsFlag.Name)
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	s.ctx, err = llama.NewContext(m, llama.ContextParams{NCtx: c.Int(llmCtxFlag.Name), NSeqMax: nSeq, Threads: threads})
	if err != nil {
		s.Close()
		return nil, err
	}
	if p := c.String(llmLoraFlag.Name); p != "" {
		if s.adapter, err = m.LoadAdapter(p); err != nil {
			s.Close()
			return nil, err
		}
		if err := s.ctx.SetAdapter(s.adapter, float32(c.Float64(llmLoraScaleFlag.Name))); err != nil {
			s.Close()
			return nil, err
		}
	}
	info := m.Info()
	log.Debug().Str("arch", info.Arch).Int("n_vocab", info.NVocab).Int("n_layer", info.NLayer).Uint64("params", info.NParams).Msg("model loaded")
	return s, nil
}

// checkThreads refuses a negative --threads and warns about more threads
// than cores: ggml's threads then spin against each other (8 threads on 2
// cores made a 4-token generation 300× slower).
func checkThreads(c *cli.Context) error {
	n := c.Int(llmThreadsFlag.Name)
	if n < 0 {
		return fmt.Errorf("--threads %d: want a positive number (or leave it out for all cores)", n)
	}
	if cores := runtime.NumCPU(); n > cores {
		log.Warn().Int("threads", n).Int("cores", cores).Msg("more threads than cores: ggml's threads will wait on each other; expect a much slower run")
	}
	return nil
}

// promptTokens tokenizes --prompt, through the chat template with --chat.
func (s *llmSession) promptTokens(c *cli.Context) ([]int32, error) {
	text := c.String(llmPromptFlag.Name)
	if c.Bool(llmChatFlag.Name) {
		var msgs []llama.Message
		if sys := c.String(llmSystemFlag.Name); sys != "" {
			msgs = append(msgs, llama.Message{Role: "system", Content: sys})
		}
		msgs = append(msgs, llama.Message{Role: "user", Content: text})
		var err error
		if text, err = s.model.ApplyChatTemplate(msgs, true); err != nil {
			return nil, err
		}
	}
	toks, err := s.model.Tokenize(text, true, true)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("--prompt: the prompt tokenizes to nothing")
	}
	return toks, nil
}

func generateAction(c *cli.Context) error {
	n := c.Int(genNFlag.Name)
	if n < 1 || n > 256 {
		return fmt.Errorf("--sequences %d: want 1..256", n)
	}
	maxTok := c.Int(genMaxTokensFlag.Name)
	if maxTok < 1 {
		return fmt.Errorf("--max-tokens %d: want a positive number", maxTok)
	}
	s, err := openLLM(c, n)
	if err != nil {
		return err
	}
	defer s.Close()
	prompt, err := s.promptTokens(c)
	if err != nil {
		return err
	}
	// Checked here, with the subtraction on the context side, so that no
	// --max-tokens (even near MaxInt) can overflow the length check.
	room := s.ctx.NCtxSeq() - len(prompt)
	if room < 1 {
		return fmt.Errorf("prompt too long: %d tokens, the context holds %d per sequence (raise --ctx, up to the model's training context)", len(prompt), s.ctx.NCtxSeq())
	}
	if maxTok > room {
		return fmt.Errorf("--max-tokens %d: the prompt (%d tokens) leaves room for at most %d tokens in the %d-token context per sequence (raise --ctx, up to the model's training context)",
			maxTok, len(prompt), max(room, 0), s.ctx.NCtxSeq())
	}
	seed := c.Uint64(genSeedFlag.Name)
	if !c.IsSet(genSeedFlag.Name) {
		seed = rand.Uint64()
		log.Info().Uint64("seed", seed).Msg("sampling with a random seed; pass --seed to reproduce")
	}
	seqs, err := s.ctx.Generate(c.Context, prompt, llama.SampleParams{
		N:           n,
		MaxTokens:   maxTok,
		Temperature: float32(c.Float64(genTempFlag.Name)),
		TopK:        c.Int(genTopKFlag.Name),
		TopP:        float32(c.Float64(genTopPFlag.Name)),
		MinP:        float32(c.Float64(genMinPFlag.Name)),
		Seed:        seed,
		Stop:        c.StringSlice(genStopFlag.Name),
		IgnoreEOG:   c.Bool(genIgnoreEOGFlag.Name),
	})
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool(llmJSONFlag.Name) {
		type jseq struct {
			Text     string    `json:"text"`
			Finish   string    `json:"finish"`
			Tokens   []int32   `json:"tokens"`
			LogProbs []float32 `json:"logprobs"`
		}
		out := struct {
			PromptTokens int    `json:"prompt_tokens"`
			Sequences    []jseq `json:"sequences"`
		}{PromptTokens: len(prompt)}
		for _, q := range seqs {
			out.Sequences = append(out.Sequences, jseq{q.Text, string(q.Finish), q.Tokens, q.LogProbs})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for i, q := range seqs {
		if n > 1 {
			fmt.Fprintf(w, "--- sequence %d (%d tokens, %s) ---\n", i, len(q.Tokens), q.Finish)
		}
		fmt.Fprintln(w, q.Text)
	}
	return nil
}
