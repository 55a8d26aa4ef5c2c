package main

import (
	"math"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// The flags of the commands whose configuration is a documented YAML
// struct (package internal/config): --config FILE, --set KEY=VALUE,
// --print-config, and flags that are shortcuts for one key each. A
// shortcut carries no default of its own (the configuration's default is
// the one default), and a flag that is not given changes nothing, so that
// every value, 0 included, can be asked for. Order: defaults, file, --set,
// then the shortcut flags (a flag wins).

var (
	configFileFlag  = &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration YAML `FILE` (strict: an unknown key is an error naming it and its line)"}
	printConfigFlag = &cli.BoolFlag{Name: "print-config", Usage: "print the resolved configuration, every key documented, and exit"}
)

// setList collects repeated --set values, each one whole.
type setList []string

func (s *setList) Set(v string) error { *s = append(*s, v); return nil }
func (s *setList) String() string     { return strings.Join(*s, " ") }

// newSetFlag is --set KEY=VALUE (repeatable). Unlike a StringSliceFlag,
// which splits its value at commas, each value is taken whole, so that YAML
// flow lists (--set 'tasks=[melt, boil]') and texts with commas work.
func newSetFlag() *cli.GenericFlag {
	return &cli.GenericFlag{Name: "set", Value: &setList{},
		Usage: "override one key, `KEY=VALUE` (the value is YAML, taken whole: --set 'tasks=[melt, boil]'; repeatable)"}
}

// setValues are the --set values given, in order.
func setValues(c *cli.Context) []string {
	if v, ok := c.Generic("set").(*setList); ok && v != nil {
		return append([]string(nil), *v...)
	}
	return nil
}

// shortcut is a flag that sets one configuration key.
type shortcut struct {
	flag cli.Flag
	key  string
}

// shortcutSets are the overrides "key=value" of the shortcut flags given
// on the command line (values as YAML: strings quoted, NaN and ±Inf as
// .nan and ±.inf so that validation names the key, lists in flow style).
func shortcutSets(c *cli.Context, shortcuts []shortcut) []string {
	var sets []string
	for _, s := range shortcuts {
		name := s.flag.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		var v string
		switch s.flag.(type) {
		case *cli.StringFlag:
			v = strconv.Quote(c.String(name))
		case *cli.IntFlag:
			v = strconv.Itoa(c.Int(name))
		case *cli.Int64Flag:
			v = strconv.FormatInt(c.Int64(name), 10)
		case *cli.Float64Flag:
			v = yamlFloat(c.Float64(name))
		case *cli.BoolFlag:
			v = strconv.FormatBool(c.Bool(name))
		case *cli.StringSliceFlag:
			var q []string
			for _, x := range splitList(c.StringSlice(name)) {
				q = append(q, strconv.Quote(x))
			}
			v = "[" + strings.Join(q, ", ") + "]"
		default:
			panic("shortcutSets: unsupported flag type for --" + name)
		}
		sets = append(sets, s.key+"="+v)
	}
	return sets
}

// yamlFloat writes v as a YAML float.
func yamlFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return ".nan"
	case math.IsInf(v, 1):
		return ".inf"
	case math.IsInf(v, -1):
		return "-.inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// configSets are a command's overrides in order: --set, then the shortcut
// flags.
func configSets(c *cli.Context, shortcuts []shortcut) []string {
	return append(setValues(c), shortcutSets(c, shortcuts)...)
}
