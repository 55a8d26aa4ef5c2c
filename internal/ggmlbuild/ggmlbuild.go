// Package ggmlbuild links llama.cpp and ggml, compiled by cgo from the pinned
// github.com/ollama/ollama module, into any binary that imports it.
package ggmlbuild

import (
	_ "github.com/ollama/ollama/llama/llama.cpp/src"
	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src"
)
