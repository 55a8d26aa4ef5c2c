// Command empo2 trains LLM agents with EMPO² (hybrid on/off-policy RL with a
// memory of self-written tips) on llama.cpp/ggml. See README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "empo2:", err)
		os.Exit(exitCode(err))
	}
}
