// Package environments defines the Env interface that the trainer plays
// episodes against, a registry of environments by name, task lists with
// train/dev/test variation splits and a pool for parallel rollouts.
//
// Conventions: pure Go (no cgo, no model imports); scores are on a 0–100
// scale; an Env is used by one goroutine at a time; errors wrap the sentinels
// of this package with %w. Sub-packages hold the environments themselves and
// register from init; import them for their side effect.
package environments
