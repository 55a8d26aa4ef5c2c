package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// version is set at link time by the Makefile (-X main.version=...).
var version = "dev"

func init() {
	register(&cli.Command{
		Name:  "version",
		Usage: "print the empo2 version and the pinned llama.cpp/ggml module",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(c.App.Writer, "empo2 %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, d := range bi.Deps {
					if d.Path == "github.com/ollama/ollama" {
						fmt.Fprintf(c.App.Writer, "llama.cpp/ggml from %s %s\n", d.Path, d.Version)
					}
				}
			}
			return nil
		},
	})
}
