package main

import (
	"math"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// Flags that are shortcuts for one configuration key each (sft, eval). A
// shortcut carries no default of its own (the configuration's default is
// the one default) and a flag that is not given changes nothing, so every
// value, 0 included, can be asked for. Order: defaults, --config, --set,
// then the shortcuts (a flag wins).

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

// overrides are a command's overrides in order: --set, then the shortcut
// flags.
func overrides(c *cli.Context, shortcuts []shortcut) []string {
	return append(configSets(c), shortcutSets(c, shortcuts)...)
}
