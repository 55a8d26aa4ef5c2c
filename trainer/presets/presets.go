// Package presets holds the named training presets of `empo2 train
// --preset`: partial YAML run configurations applied over the defaults
// (trainer.DefaultConfig) and under a config file, --set and flags.
package presets

import (
	"embed"
	"fmt"
	"sort"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Default is the preset used when none is named.
const Default = "empo2"

// Names lists the presets, sorted.
func Names() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Get returns the YAML text of preset name.
func Get(name string) ([]byte, error) {
	b, err := files.ReadFile(name + ".yaml")
	if err != nil || strings.ContainsAny(name, "/.") || name == "" {
		return nil, fmt.Errorf("unknown preset %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}
