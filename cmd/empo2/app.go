package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/internal/safefile"
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
		Usage:   "ggml backend library `FILE` to load, e.g. bin/libggml-cuda.so built by 'make cuda' (repeatable; libggml-cuda.so beside the binary is loaded by default), or 'sim': a host-memory stand-in for a GPU (docs/gpu.md)",
		EnvVars: []string{"EMPO2_BACKEND"},
	}
)

// globalFlags are accepted before the command and anywhere after it
// (permuteArgs moves them to the front).
func globalFlags() []cli.Flag { return []cli.Flag{logLevelFlag, logFormatFlag, backendFlag} }

// commands is filled by the init functions of the files of this package,
// one file per top-level command.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

func newApp() *cli.App {
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	return &cli.App{
		Name:                 "empo2",
		Usage:                "train LLM agents with EMPO² on llama.cpp/ggml",
		Flags:                globalFlags(),
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
		// Colours only on a terminal: no escape codes in files and pipes.
		w = zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly, NoColor: !term.IsTerminal(int(os.Stderr.Fd()))}
	default:
		return fmt.Errorf("--log-format %q: want console or json", c.String(logFormatFlag.Name))
	}
	log.Logger = zerolog.New(w).With().Timestamp().Logger()
	return nil
}

// logDur is how durations go into log fields: a string with units
// ("46ms", "1.5s"), the one format of every command (zerolog's Dur would
// write a bare number of milliseconds).
func logDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond / 10).String()
	}
	return d.String()
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
		if p == "sim" {
			if err := llama.RegisterSimDevice(runtime.NumCPU()); err != nil {
				return fmt.Errorf("--backend sim: %w", err)
			}
			log.Info().Str("device", llama.SimDevice).Msg("registered the host-memory stand-in for a GPU")
			continue
		}
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

// run runs the app on args (os.Args), after permuteArgs.
func run(args []string) error {
	app := newApp()
	return app.Run(permuteArgs(app, args))
}

// permuteArgs moves the flags that follow a leaf command's positional
// arguments in front of them. urfave/cli v2 stops parsing flags at the first
// positional argument, but `empo2 env gold textlab melt --variation 7` and
// `empo2 memory import tips.jsonl --db mem.db` should work. Flags are told
// apart by the leaf command's own definitions, so a flag's value (even one
// starting with "-") is never taken for an argument. A "--" ends the flags:
// it is kept, placed before all the positional arguments. Global flags
// (--log-level, ...) given after the command name are moved in front of it,
// unless the command has a flag of the same name.
func permuteArgs(app *cli.App, args []string) []string {
	out, globals := permuteCommand(app, args)
	if len(globals) == 0 || len(out) == 0 {
		return out
	}
	return append(append(append([]string{}, out[0]), globals...), out[1:]...)
}

// isGlobal tells whether tok names a global flag that the command's own
// flags do not shadow.
func isGlobal(app *cli.App, own []cli.Flag, tok string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(tok, "-"), "=")
	for _, f := range own {
		if slices.Contains(f.Names(), name) {
			return false
		}
	}
	for _, f := range app.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

func permuteCommand(app *cli.App, args []string) (out, globals []string) {
	out = append([]string{}, args[:min(1, len(args))]...)
	i := 1
	flags, cmds := app.Flags, app.Commands
	var leaf *cli.Command
	for i < len(args) {
		if isFlagToken(args[i]) {
			if leaf != nil && isGlobal(app, flags, args[i]) {
				n := flagTokens(app.Flags, args, i)
				globals = append(globals, args[i:i+n]...)
				i += n
				continue
			}
			n := flagTokens(flags, args, i)
			out = append(out, args[i:i+n]...)
			i += n
			continue
		}
		c := findCommand(cmds, args[i])
		if c == nil {
			break
		}
		out = append(out, args[i])
		i++
		leaf, flags, cmds = c, c.Flags, c.Subcommands
		if len(cmds) == 0 {
			break
		}
	}
	if leaf == nil || len(leaf.Subcommands) > 0 {
		return append(out, args[i:]...), globals
	}
	var flagToks, pos []string
	dashdash := false
	for i < len(args) {
		switch tok := args[i]; {
		case tok == "--" && !dashdash:
			dashdash = true
			i++
		case dashdash || !isFlagToken(tok):
			pos = append(pos, tok)
			i++
		case isGlobal(app, flags, tok):
			n := flagTokens(app.Flags, args, i)
			globals = append(globals, args[i:i+n]...)
			i += n
		default:
			n := flagTokens(flags, args, i)
			flagToks = append(flagToks, args[i:i+n]...)
			i += n
			if isHelp(tok) || (n == 1 && takesValue(flags, tok) && !strings.Contains(tok, "=")) {
				// Help shows the command's help, and a value flag that ends
				// the line gets urfave/cli's "needs an argument" error; in
				// both cases the positional arguments must not follow it.
				return append(out, flagToks...), globals
			}
		}
	}
	out = append(out, flagToks...)
	if dashdash {
		out = append(out, "--")
	}
	return append(out, pos...), globals
}

func isFlagToken(tok string) bool { return len(tok) > 1 && tok[0] == '-' && tok != "--" }

// flagTokens is how many tokens, from args[i], one flag occupies: 2 for a
// flag that takes a value given as the next token, else 1 (booleans, help,
// "--name=value", a value flag at the end of args, and unknown flags, which
// urfave/cli then reports).
func flagTokens(flags []cli.Flag, args []string, i int) int {
	if strings.Contains(args[i], "=") || i+1 >= len(args) || !takesValue(flags, args[i]) {
		return 1
	}
	return 2
}

// takesValue tells whether the flag token tok names one of flags that is
// not a boolean.
func takesValue(flags []cli.Flag, tok string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(tok, "-"), "=")
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			_, isBool := f.(*cli.BoolFlag)
			return !isBool
		}
	}
	return false
}

func isHelp(tok string) bool { return tok == "-h" || tok == "--help" || tok == "-help" }

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

// Interrupts: a command that writes handles SIGINT and SIGTERM itself, so
// that it closes its memory database and its outputs (a write in progress
// completes; nothing half-written is left) and then exits 130 or 143 (128
// + the signal) with a one-line summary.

// interruptError ends the program with the exit status of signal sig.
type interruptError struct {
	sig os.Signal
	msg string
}

func (e *interruptError) Error() string { return e.msg }

// exitCode is the program's exit status for err (nil: 0): 128 + the signal
// for an interrupted command, else 1.
func exitCode(err error) int {
	var ie *interruptError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ie):
		if s, ok := ie.sig.(syscall.Signal); ok {
			return 128 + int(s)
		}
		return 130
	}
	return 1
}

// signals watches SIGINT and SIGTERM for one command.
type signals struct {
	mu   sync.Mutex
	sig  os.Signal
	stop func()
}

// interruptible returns a context that SIGINT and SIGTERM cancel, with
// safefile's own signal handling off (a file being written completes, and
// the command's deferred Abort removes a temporary one). Call stop when the
// command ends.
func interruptible(c *cli.Context) (context.Context, *signals) {
	ctx, cancel := context.WithCancel(c.Context)
	s := &signals{}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	safefile.SetSignalCleanup(false)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			s.mu.Lock()
			s.sig = sig
			s.mu.Unlock()
			cancel()
		case <-done:
		}
	}()
	s.stop = func() {
		signal.Stop(ch)
		close(done)
		cancel()
		safefile.SetSignalCleanup(true)
	}
	return ctx, s
}

// caught reports whether a signal arrived.
func (s *signals) caught() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig != nil
}

// interrupted is the error that ends the command after a signal: msg,
// with the signal's name, and the exit status 128 + the signal.
func (s *signals) interrupted(msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := "SIGINT"
	if s.sig == syscall.SIGTERM {
		name = "SIGTERM"
	}
	return &interruptError{sig: s.sig, msg: msg + " (" + name + ")"}
}
