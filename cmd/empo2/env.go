package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/environments"
	_ "github.com/empo2/empo2/environments/scienceworld" // registers "scienceworld"
	_ "github.com/empo2/empo2/environments/textlab"      // registers "textlab"
)

// Flags of `empo2 env` (package variables, shared by its subcommands).
var (
	envVariationFlag = &cli.IntFlag{Name: "variation", Aliases: []string{"goal"}, Usage: "task variation `N` (--goal is the same, for WebShop goals)"}
	envSeedFlag      = &cli.Int64Flag{Name: "seed", Usage: "reset seed", Value: 0}
	envDataFlag      = &cli.StringFlag{Name: "data", Usage: "data `DIR` of the environment (WebShop)", EnvVars: []string{"EMPO2_ENV_DATA"}}
	envJarFlag       = &cli.StringFlag{Name: "scienceworld-jar", Usage: "ScienceWorld simulator `FILE` (the jar from the scienceworld wheel)", EnvVars: []string{"SCIENCEWORLD_JAR"}}
	envSimpFlag      = &cli.StringFlag{Name: "simplifications", Usage: "comma-separated simplifications, e.g. easy (ScienceWorld, textlab)"}
	envLimitFlag     = &cli.IntFlag{Name: "step-limit", Usage: "step limit `N`, counted in simulator moves (0: the task's own)"}
	envCorrectFlag   = &cli.BoolFlag{Name: "correct-actions", Usage: "replace an invalid action by the most similar valid one (Jaccard)"}
	envJSONFlag      = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
	envActionsFlag   = &cli.StringFlag{Name: "actions", Usage: "replay actions from `FILE` (one per line; blank lines and # comments skipped) instead of reading stdin"}
	envQuietFlag     = &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print the actions and the final score only"}
	envOptFlag       = &cli.StringSliceFlag{Name: "env-opt", Usage: "environment-specific option `KEY=VALUE` (repeatable), e.g. xmx=2g, java=PATH, timeout=30s, info=full (ScienceWorld)"}
)

func envOptionFlags() []cli.Flag {
	return []cli.Flag{envDataFlag, envJarFlag, envSimpFlag, envLimitFlag, envCorrectFlag, envOptFlag}
}

func init() {
	register(&cli.Command{
		Name:  "env",
		Usage: "list, play and check the environments (textlab, scienceworld, webshop)",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list environments and their tasks with variation counts and train/dev/test splits",
				ArgsUsage: "[ENV]",
				Flags:     append([]cli.Flag{envJSONFlag}, envOptionFlags()...),
				Action:    envList,
			},
			{
				Name:      "play",
				Usage:     "play a task in the terminal, reading actions from stdin (or --actions FILE)",
				ArgsUsage: "ENV [TASK]",
				Description: "Type actions at the prompt. Also: 'valid' (or 'help') lists the valid actions, 'score' shows\n" +
					"the score, 'quit' or end of input ends. TASK may be left out when the environment has a\n" +
					"single task. Flags may also follow ENV and TASK.",
				Flags:  append([]cli.Flag{envVariationFlag, envSeedFlag, envActionsFlag, envQuietFlag}, envOptionFlags()...),
				Action: envPlay,
			},
			{
				Name:      "gold",
				Usage:     "play the gold action sequence of a task variation and print the final score",
				ArgsUsage: "ENV [TASK]",
				Flags:     append([]cli.Flag{envVariationFlag, envSeedFlag, envQuietFlag}, envOptionFlags()...),
				Action:    envGold,
			},
			envDemosCommand(), // env_demos.go
		},
	})
}

// envOptKeys are the --env-opt keys each environment understands (besides
// correct_actions, which every one does); an environment missing here is
// not checked (TestEnvOptKeysCoverRegistry keeps the table complete).
var envOptKeys = map[string][]string{
	"textlab":      {},
	"scienceworld": {"java", "xmx", "timeout", "startup_timeout", "info", "classpath"},
	"webshop":      {"goals", "reward", "reviews", "actions", "products"},
}

// checkEnvOpts refuses --env-opt keys the environment does not know.
func checkEnvOpts(env string, o environments.Options) error {
	known, ok := envOptKeys[env]
	if !ok {
		return nil
	}
	for k := range o.Extra {
		if k != environments.ExtraCorrectActions && !slices.Contains(known, k) {
			if len(known) == 0 {
				return fmt.Errorf("--env-opt %s: %s takes no environment options", k, env)
			}
			return fmt.Errorf("--env-opt %s: unknown option of %s (known: %s)", k, env, strings.Join(known, ", "))
		}
	}
	return nil
}

func envOptions(c *cli.Context) (environments.Options, error) {
	if n := c.Int(envLimitFlag.Name); n < 0 {
		return environments.Options{}, fmt.Errorf("--step-limit %d: want a positive number of steps (0 or none: the task's own)", n)
	}
	o := environments.Options{
		DataDir:         c.String(envDataFlag.Name),
		Jar:             c.String(envJarFlag.Name),
		Simplifications: c.String(envSimpFlag.Name),
		StepLimit:       c.Int(envLimitFlag.Name),
		Extra:           map[string]string{},
	}
	for _, kv := range c.StringSlice(envOptFlag.Name) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return o, fmt.Errorf("--env-opt %q: want KEY=VALUE", kv)
		}
		o.Extra[strings.TrimSpace(k)] = v
	}
	if c.Bool(envCorrectFlag.Name) {
		o.Extra[environments.ExtraCorrectActions] = "jaccard"
	}
	return o, nil
}

// applyEnvExtras adds --env-opt KEY=VALUE and --correct-actions to the
// extra options of a configuration's env_options (the other environment
// flags are shortcuts for keys) and checks the keys for env.
func applyEnvExtras(c *cli.Context, env string, o *environments.Options) error {
	flags, err := envOptions(c)
	if err != nil {
		return err
	}
	if len(flags.Extra) > 0 && o.Extra == nil {
		o.Extra = map[string]string{}
	}
	for k, v := range flags.Extra {
		o.Extra[k] = v
	}
	return checkEnvOpts(env, *o)
}

type envTaskJSON struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Variations  int    `json:"variations"`
	Train       []int  `json:"train"`
	Dev         []int  `json:"dev"`
	Test        []int  `json:"test"`
	StepLimit   int    `json:"step_limit"`
	HeldOut     bool   `json:"held_out"`
}

type envJSON struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Tasks       []envTaskJSON `json:"tasks"`
	Error       string        `json:"error,omitempty"`
}

func envList(c *cli.Context) error {
	args := c.Args().Slice()
	names := environments.Names()
	if len(args) > 1 {
		return fmt.Errorf("env list takes at most one ENV, got %d arguments", len(args))
	}
	if len(args) == 1 {
		if _, err := environments.Lookup(args[0]); err != nil {
			return err
		}
		names = args
	}
	opts, err := envOptions(c)
	if err != nil {
		return err
	}
	if len(opts.Extra) > 0 {
		for _, n := range names {
			if err := checkEnvOpts(n, opts); err != nil {
				return err
			}
		}
	}
	var all []envJSON
	for _, n := range names {
		spec, _ := environments.Lookup(n)
		e := envJSON{Name: n, Description: spec.Description, Tasks: []envTaskJSON{}}
		tasks, err := spec.Tasks(opts)
		if err != nil {
			e.Error = err.Error()
			log.Warn().Err(err).Str("env", n).Msg("cannot list tasks")
		}
		for _, t := range tasks {
			e.Tasks = append(e.Tasks, envTaskJSON{t.Name, t.Description, t.Variations, envNonNil(t.Train), envNonNil(t.Dev), envNonNil(t.TestVars), t.StepLimit, t.HeldOut})
		}
		all = append(all, e)
	}
	w := c.App.Writer
	if c.Bool(envJSONFlag.Name) {
		enc := json.NewEncoder(w)
		return enc.Encode(all)
	}
	tw := newTable(w, "ENV", "TASK", "VARIATIONS", "TRAIN", "DEV", "TEST", "STEP LIMIT", "HELD OUT", "DESCRIPTION")
	for _, e := range all {
		if e.Error != "" {
			tw.Append([]string{e.Name, "-", "-", "-", "-", "-", "-", "-", "unavailable: " + e.Error})
		}
		for _, t := range e.Tasks {
			held := ""
			if t.HeldOut {
				held = "yes"
			}
			tw.Append([]string{e.Name, t.Name, strconv.Itoa(t.Variations), strconv.Itoa(len(t.Train)), strconv.Itoa(len(t.Dev)), strconv.Itoa(len(t.Test)), strconv.Itoa(t.StepLimit), held, t.Description})
		}
	}
	tw.Render()
	return nil
}

func envNonNil(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}

// envOpen resolves ENV [TASK] and --variation and starts an instance.
func envOpen(c *cli.Context) (environments.Env, environments.Task, int, error) {
	args := c.Args().Slice()
	if len(args) < 1 || len(args) > 2 {
		return nil, environments.Task{}, 0, fmt.Errorf("want ENV [TASK], got %d arguments (environments: %s)", len(args), strings.Join(environments.Names(), ", "))
	}
	spec, err := environments.Lookup(args[0])
	if err != nil {
		return nil, environments.Task{}, 0, err
	}
	opts, err := envOptions(c)
	if err != nil {
		return nil, environments.Task{}, 0, err
	}
	if err := checkEnvOpts(args[0], opts); err != nil {
		return nil, environments.Task{}, 0, err
	}
	tasks, err := spec.Tasks(opts)
	if err != nil {
		return nil, environments.Task{}, 0, err
	}
	var name string
	if len(args) == 2 {
		name = args[1]
	}
	task, err := environments.FindTask(tasks, name)
	if err != nil {
		return nil, environments.Task{}, 0, err
	}
	v := c.Int(envVariationFlag.Name)
	if err := environments.CheckVariation(task, v); err != nil {
		return nil, environments.Task{}, 0, err
	}
	env, err := spec.New(opts)
	if err != nil {
		return nil, environments.Task{}, 0, err
	}
	return env, task, v, nil
}

func envGold(c *cli.Context) error {
	env, task, v, err := envOpen(c)
	if err != nil {
		return err
	}
	defer env.Close()
	gp, ok := env.(environments.GoldProvider)
	if !ok {
		return fmt.Errorf("%w: %s has no gold action sequences", environments.ErrNotSupported, c.Args().First())
	}
	ctx := c.Context
	gold, err := gp.GoldActions(ctx, task.Name, v)
	if err != nil {
		return err
	}
	res, err := env.Reset(ctx, task.Name, v, c.Int64(envSeedFlag.Name))
	if err != nil {
		return err
	}
	w := c.App.Writer
	quiet := c.Bool(envQuietFlag.Name)
	opts, _ := envOptions(c) // already checked by envOpen
	limit := environments.StepLimit(task, opts)
	fmt.Fprintf(w, "%s %s variation %d: %d gold actions\n", c.Args().First(), task.Name, v, len(gold))
	if !quiet {
		fmt.Fprintf(w, "Task: %s\n%s\n", res.TaskDescription, res.Observation)
	}
	done := false
	n := 0
	for _, a := range gold {
		r, err := env.Step(ctx, a)
		if err != nil {
			return fmt.Errorf("gold action %d %q: %w", n+1, a, err)
		}
		n++
		envPrintStep(w, a, r, env.Score(), n, limit, quiet)
		if r.Done {
			done = true
			break
		}
	}
	return envPlayEnd(w, env, n, done, nil)
}

func envFmtScore(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) }

// envMoves is the step count that the step limit applies to: the
// simulator's own move count when it reports one (Info["moves"];
// ScienceWorld counts its initial look and not every action), else the
// actions taken.
func envMoves(r environments.StepResult, actions int) int {
	switch m := r.Info["moves"].(type) {
	case int:
		return m
	case int64:
		return int(m)
	case float64:
		return int(m)
	}
	return actions
}

// envPrintStep prints one step: the action (unless empty), the
// observation and a status line with the reward, the score and the steps
// (simulator moves where the environment counts them) used of the limit.
func envPrintStep(w io.Writer, action string, r environments.StepResult, score float64, step, limit int, quiet bool) {
	step = envMoves(r, step)
	if action != "" {
		fmt.Fprintf(w, "> %s\n", action)
	}
	if quiet {
		return
	}
	if from, ok := r.Info["corrected_from"]; ok {
		fmt.Fprintf(w, "(corrected from %q)\n", from)
	}
	fmt.Fprintln(w, strings.TrimRight(r.Observation, "\n"))
	fmt.Fprintf(w, "[reward %+g, score %s, step %d/%d, done %v]\n", r.Reward, envFmtScore(score), step, limit, r.Done)
}

func envPlay(c *cli.Context) error {
	env, task, v, err := envOpen(c)
	if err != nil {
		return err
	}
	defer env.Close()
	var in io.Reader = os.Stdin
	replay := c.String(envActionsFlag.Name)
	if replay != "" {
		f, err := os.Open(replay)
		if err != nil {
			return fmt.Errorf("--actions: %w", err)
		}
		defer f.Close()
		in = f
	}
	// lines come from a reader goroutine, so that Ctrl-C (SIGINT) or
	// SIGTERM while waiting for input still ends with the final score
	ctx, sig := interruptible(c)
	defer sig.stop()
	res, err := env.Reset(ctx, task.Name, v, c.Int64(envSeedFlag.Name))
	if err != nil {
		return err
	}
	w := c.App.Writer
	quiet := c.Bool(envQuietFlag.Name)
	opts, _ := envOptions(c) // already checked by envOpen
	limit := environments.StepLimit(task, opts)
	fmt.Fprintf(w, "%s %s variation %d (step limit %d)\nTask: %s\n%s\n", c.Args().First(), task.Name, v, limit, res.TaskDescription, strings.TrimRight(res.Observation, "\n"))
	interactive := replay == "" && term.IsTerminal(int(os.Stdin.Fd()))
	if interactive {
		fmt.Fprintln(w, "(type an action; 'valid' lists the valid actions, 'score' shows the score, 'quit' or Ctrl-D ends)")
	}
	lines := make(chan string)
	var scanErr error
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		scanErr = sc.Err()
	}()
	n, moves := 0, 0
	done := false
	for !done {
		if interactive {
			fmt.Fprint(w, "> ")
		}
		var line string
		var more bool
		select {
		case line, more = <-lines:
		case <-ctx.Done():
			if interactive {
				fmt.Fprintln(w)
			}
			if err := envPlayEnd(w, env, n, done, nil); err != nil {
				return err
			}
			return sig.interrupted("env play interrupted")
		}
		if !more {
			if interactive { // Ctrl-D: end the prompt line
				fmt.Fprintln(w)
			}
			break
		}
		a := strings.TrimSpace(line)
		if a == "" || strings.HasPrefix(a, "#") {
			continue
		}
		switch strings.ToLower(a) {
		case "quit", "exit":
			return envPlayEnd(w, env, n, done, nil)
		case "score":
			fmt.Fprintf(w, "score: %s (step %d/%d)\n", envFmtScore(env.Score()), moves, limit)
			continue
		case "valid", "help":
			va, err := env.ValidActions(ctx)
			if errors.Is(err, environments.ErrNotSupported) {
				fmt.Fprintln(w, "(this environment does not list its valid actions)")
				continue
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(w, strings.Join(va, "\n"))
			continue
		}
		r, err := env.Step(ctx, a)
		if err != nil {
			if sig.caught() {
				_ = envPlayEnd(w, env, n, done, nil)
				return sig.interrupted("env play interrupted")
			}
			return fmt.Errorf("action %d %q: %w", n+1, a, err)
		}
		n++
		moves = envMoves(r, n)
		if interactive { // the terminal already shows what was typed
			a = ""
		}
		envPrintStep(w, a, r, env.Score(), n, limit, quiet)
		done = r.Done
	}
	return envPlayEnd(w, env, n, done, scanErr)
}

// envPlayEnd prints the final score line of play and gold (unless err).
func envPlayEnd(w io.Writer, env environments.Env, n int, done bool, err error) error {
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "final score: %s after %d actions (done: %v)\n", envFmtScore(env.Score()), n, done)
	return nil
}
