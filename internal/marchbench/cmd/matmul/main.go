// Command matmul prints the GFLOP/s of a 1024×1024 F32 ggml matmul on one
// thread. marchbench's benchmark builds it without -march to compare.
package main

import (
	"fmt"
	"os"

	"github.com/empo2/empo2/internal/marchbench"
)

func main() {
	g, err := marchbench.MatmulGFLOPS(1024, 1, 5)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%.3f\n", g)
}
