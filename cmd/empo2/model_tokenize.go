package main

// `empo2 model tokenize`: a model's token ids for a text, as llama.cpp's
// llama-tokenize prints them.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/llama"
)

var (
	modelTokJSONFlag      = &cli.BoolFlag{Name: "json", Usage: "print {\"ids\": […], \"pieces\": […]}"}
	modelTokNoSpecialFlag = &cli.BoolFlag{Name: "no-special", Usage: "do not match control tokens written in the text (<|im_start|> becomes plain text); llama.cpp still matches user-defined added tokens such as <think>"}
)

var modelTokenizeCommand = &cli.Command{
	Name:      "tokenize",
	Usage:     "print a model's token ids (and pieces) for a text, as llama.cpp's llama-tokenize does",
	ArgsUsage: "[--] TEXT… (the words are joined by single spaces; no TEXT: standard input)",
	Description: "Added and special tokens written in the text (<|im_start|>, <think>) are matched as single tokens, as\n" +
		"   Hugging Face tokenizers do; BOS/EOS are added only where the model's tokenizer.ggml.add_bos_token/add_eos_token say so.\n" +
		"   Only the vocabulary is read, not the weights (a 7B model's tokenizes in about a second).\n\n" +
		"Examples:\n" +
		"   empo2 model tokenize -m tiny.gguf -- \"go to the kitchen\"\n" +
		"   empo2 model tokenize -m qwen.gguf --json -- '<|im_start|>user\\nHi<|im_end|>'\n" +
		"   printf 'text with\\nnewlines' | empo2 model tokenize -m qwen.gguf --no-special",
	Flags:  []cli.Flag{llmModelFlag, modelTokJSONFlag, modelTokNoSpecialFlag},
	Action: modelTokenize,
}

func modelTokenize(c *cli.Context) error {
	text := strings.Join(c.Args().Slice(), " ")
	if c.NArg() == 0 {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<30+1))
		if err != nil {
			return fmt.Errorf("model tokenize: reading standard input: %w", err)
		}
		text = string(b)
	}
	m, err := llama.LoadVocab(c.String(llmModelFlag.Name))
	if err != nil {
		return fmt.Errorf("model tokenize: %w", err)
	}
	defer m.Close()
	ids, err := m.Tokenize(text, true, !c.Bool(modelTokNoSpecialFlag.Name))
	if err != nil {
		return fmt.Errorf("model tokenize: %w", err)
	}
	pieces := make([]string, len(ids))
	for i, id := range ids {
		if pieces[i], err = m.TokenPiece(id); err != nil {
			return fmt.Errorf("model tokenize: %w", err)
		}
	}
	if c.Bool(modelTokJSONFlag.Name) {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetEscapeHTML(false) // "<|im_start|>", not "\u003c|im_start|\u003e"
		return enc.Encode(struct {
			IDs    []int32  `json:"ids"`
			Pieces []string `json:"pieces"`
		}{ids, pieces})
	}
	for i, id := range ids {
		// as llama-tokenize: "ID -> 'piece'", the piece Go-quoted when it is
		// not printable UTF-8 (a partial multi-byte character, a newline)
		p := "'" + pieces[i] + "'"
		if !strconv.CanBackquote(pieces[i]) {
			p = strconv.Quote(pieces[i])
		}
		fmt.Fprintf(c.App.Writer, "%6d -> %s\n", id, p)
	}
	return nil
}
