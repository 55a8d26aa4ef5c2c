package config

import (
	"bytes"
	"fmt"
	"os"
)

// ReadFile reads a configuration file for Apply; "" is no file (nil).
// Its error wraps the schema's sentinel.
func (s *Schema[T]) ReadFile(file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", s.err, err)
	}
	return b, nil
}

// Apply decodes raw onto c strictly (Decode; nil raw: nothing; what names
// the source in errors), then applies the overrides "key.path=value" in
// order (Set).
func (s *Schema[T]) Apply(c *T, raw []byte, what string, sets []string) error {
	if raw != nil {
		if err := s.Decode(bytes.NewReader(raw), c, what); err != nil {
			return err
		}
	}
	for _, kv := range sets {
		if err := s.Set(c, kv); err != nil {
			return err
		}
	}
	return nil
}

// Load resolves a configuration as every command does: the defaults, then
// file (strict: an unknown key is an error naming it and its line; "" =
// none), then the overrides in order.
func (s *Schema[T]) Load(file string, sets []string) (T, error) {
	c := s.def()
	raw, err := s.ReadFile(file)
	if err != nil {
		return c, err
	}
	return c, s.Apply(&c, raw, file, sets)
}
