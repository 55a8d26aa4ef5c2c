package modelgen_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/modelgen"
)

func ExampleWrite() {
	dir, _ := os.MkdirTemp("", "modelgen-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tiny.gguf")

	cfg := modelgen.DefaultConfig() // 2 layers, hidden 64, vocab 512, f32
	if err := modelgen.Write(path, cfg); err != nil {
		fmt.Println(err)
		return
	}
	f, err := gguf.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	arch, _ := f.String("general.architecture")
	pre, _ := f.String("tokenizer.ggml.pre")
	n, _ := f.ArrayLen("tokenizer.ggml.tokens")
	fmt.Println(arch, pre, n, len(f.Tensors), cfg.ParamCount())

	tok, _ := cfg.Tokenizer()
	ids := tok.Encode("> open door")
	fmt.Println(tok.Decode(ids))
	// Output:
	// qwen2 qwen2 512 27 139840
	// > open door
}
