package main

import "github.com/urfave/cli/v2"

// Flags of the commands that read a YAML configuration (internal/config):
// --config FILE, --set KEY=VALUE (repeatable) and --print-config. Each
// command gets its own flag values from configFlags; read them with
// configFile, configSets and printConfig.
const (
	configFlagName      = "config"
	setFlagName         = "set"
	printConfigFlagName = "print-config"
)

// setValues is the value of a --set flag: one KEY=VALUE per occurrence,
// taken whole. (urfave/cli's StringSliceFlag splits every value at commas,
// which cuts a YAML flow list "tasks=[melt, boil]" and any prose with a
// comma.)
type setValues []string

func (v *setValues) Set(s string) error { *v = append(*v, s); return nil }
func (v *setValues) String() string     { return "" }
func (v *setValues) Get() any           { return []string(*v) }

// configFlags returns new --config, --set and --print-config flags; what
// names the configuration in the help ("run", "SFT", "eval").
func configFlags(what string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: configFlagName, Aliases: []string{"c"}, Usage: what + " configuration YAML `FILE` (optional: defaults and flags suffice)"},
		&cli.GenericFlag{Name: setFlagName, Value: &setValues{},
			Usage: "override one key, `KEY=VALUE` (the value is YAML, taken whole: commas included; repeatable), e.g. --set 'tasks=[melt, boil]'"},
		&cli.BoolFlag{Name: printConfigFlagName, Usage: "print the resolved configuration, every key documented, and exit"},
	}
}

// configFile is --config's value ("" when not given).
func configFile(c *cli.Context) string { return c.String(configFlagName) }

// configSets are the --set values in command-line order.
func configSets(c *cli.Context) []string {
	if v, ok := c.Generic(setFlagName).(*setValues); ok && v != nil {
		return append([]string(nil), (*v)...)
	}
	return nil
}

// printConfig reports whether --print-config was given.
func printConfig(c *cli.Context) bool { return c.Bool(printConfigFlagName) }
