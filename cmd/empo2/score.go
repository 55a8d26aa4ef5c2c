package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

var scoreContFlag = &cli.StringFlag{Name: "continuation", Usage: "continuation `TEXT` to score (tokenized on its own, special tokens parsed)", Required: true}

func init() {
	register(&cli.Command{
		Name:  "score",
		Usage: "print the log-prob of every continuation token given the prompt (teacher forcing)",
		Description: "Log-probs are those of the raw model (log-softmax at temperature 1) with the\n" +
			"adapter applied when --lora is given.\n" +
			"Examples:\n" +
			"  empo2 score --model tiny.gguf --prompt 'The fox' --continuation ' jumps over'\n" +
			"  empo2 score --model m.gguf --lora a.gguf --chat --prompt 'Hi!' --continuation 'Hello.<|im_end|>' --json",
		Flags:  []cli.Flag{llmModelFlag, llmLoraFlag, llmLoraScaleFlag, llmPromptFlag, scoreContFlag, llmChatFlag, llmSystemFlag, llmThreadsFlag, llmCtxFlag, llmGPULayersFlag, llmJSONFlag},
		Action: scoreAction,
	})
}

func scoreAction(c *cli.Context) error {
	s, err := openLLM(c, 1)
	if err != nil {
		return err
	}
	defer s.Close()
	prompt, err := s.promptTokens(c)
	if err != nil {
		return err
	}
	cont, err := s.model.Tokenize(c.String(scoreContFlag.Name), false, true)
	if err != nil {
		return err
	}
	if len(cont) == 0 {
		return fmt.Errorf("--continuation: tokenizes to nothing")
	}
	lps, err := s.ctx.Score(c.Context, prompt, cont)
	if err != nil {
		return err
	}
	type row struct {
		Index   int     `json:"index"`
		ID      int32   `json:"id"`
		Piece   string  `json:"piece"`
		LogProb float32 `json:"logprob"`
	}
	rows := make([]row, len(cont))
	var sum float64
	for i, t := range cont {
		piece, err := s.model.TokenPiece(t)
		if err != nil {
			return err
		}
		rows[i] = row{i, t, piece, lps[i]}
		sum += float64(lps[i])
	}
	w := c.App.Writer
	if c.Bool(llmJSONFlag.Name) {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			PromptTokens int     `json:"prompt_tokens"`
			Tokens       []row   `json:"tokens"`
			SumLogProb   float64 `json:"sum_logprob"`
		}{len(prompt), rows, sum})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tid\tpiece\tlogprob")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.6f\n", r.Index, r.ID, strconv.Quote(r.Piece), r.LogProb)
	}
	fmt.Fprintf(tw, "sum\t\t\t%.6f\n", sum)
	return tw.Flush()
}
