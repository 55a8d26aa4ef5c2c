package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/llama"
)

// Global flags, as package variables (geth style).
var (
	logLevelFlag = &cli.StringFlag{
		Name:    "log-level",
		Usage:   "log level: trace, debug, info, warn, error",
		Value:   "info",
		EnvVars: []string{"EMPO2_LOG_LEVEL"},
	}
	logFormatFlag = &cli.StringFlag{
		Name:    "log-format",
		Usage:   "log format: console or json",
		Value:   "console",
		EnvVars: []string{"EMPO2_LOG_FORMAT"},
	}
	backendFlag = &cli.StringSliceFlag{
		Name:    "backend",
		Usage:   "ggml backend library to load, e.g. bin/libggml-cuda.so from `make cuda` (repeatable; libggml-cuda.so beside the binary is loaded by default)",
		EnvVars: []string{"EMPO2_BACKEND"},
	}
)

// commands is filled by the init functions of the files of this package,
// one file per top-level command.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

func newApp() *cli.App {
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	return &cli.App{
		Name:                 "empo2",
		Usage:                "train LLM agents with EMPO² on llama.cpp/ggml",
		Flags:                []cli.Flag{logLevelFlag, logFormatFlag, backendFlag},
		Commands:             commands,
		Before:               func(c *cli.Context) error { return errors.Join(setupLogging(c), loadBackends(c)) },
		EnableBashCompletion: true,
		ExitErrHandler:       func(*cli.Context, error) {}, // main prints the error once
	}
}

// setupLogging configures zerolog from the global flags; it runs before any command.
func setupLogging(c *cli.Context) error {
	lvl, err := zerolog.ParseLevel(strings.ToLower(c.String(logLevelFlag.Name)))
	if err != nil || lvl == zerolog.NoLevel {
		return fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", c.String(logLevelFlag.Name))
	}
	zerolog.SetGlobalLevel(lvl)
	var w io.Writer = os.Stderr
	switch c.String(logFormatFlag.Name) {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	default:
		return fmt.Errorf("--log-format %q: want console or json", c.String(logFormatFlag.Name))
	}
	log.Logger = zerolog.New(w).With().Timestamp().Logger()
	return nil
}

// loadBackends loads the ggml backend libraries named by --backend, or else
// the CUDA backend that `make cuda` puts beside the binary, if it is there.
// Loading is lazy in effect: the CPU backend is always linked in.
func loadBackends(c *cli.Context) error {
	paths := c.StringSlice(backendFlag.Name)
	if len(paths) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil
		}
		cand := filepath.Join(filepath.Dir(exe), "libggml-cuda.so")
		if _, err := os.Stat(cand); err != nil {
			return nil
		}
		paths = []string{cand}
	}
	for _, p := range paths {
		if err := llama.LoadBackend(p); err != nil {
			return fmt.Errorf("--backend %s: %w", p, err)
		}
		log.Info().Str("backend", p).Msg("loaded ggml backend")
	}
	return nil
}

// Output helpers shared by the commands.

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable is a borderless, left-aligned table with the header as given.
func newTable(w io.Writer, header ...string) *tablewriter.Table {
	t := tablewriter.NewWriter(w)
	t.SetHeader(header)
	t.SetAutoWrapText(false)
	t.SetAutoFormatHeaders(false)
	t.SetBorder(false)
	t.SetColumnSeparator(" ")
	t.SetCenterSeparator(" ")
	t.SetHeaderLine(true)
	t.SetAlignment(tablewriter.ALIGN_LEFT)
	t.SetHeaderAlignment(tablewriter.ALIGN_LEFT)
	return t
}
