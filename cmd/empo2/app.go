package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"
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
		Flags:                []cli.Flag{logLevelFlag, logFormatFlag},
		Commands:             commands,
		Before:               setupLogging,
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
