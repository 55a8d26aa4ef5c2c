package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// interval is a key's allowed range, from its `range` tag: "[lo,hi]" with
// "(" or ")" for an open end and an empty bound for none ("[0,]": ≥ 0,
// "(0,10]", "[,0]": ≤ 0).
type interval struct {
	lo, hi         float64 // ±Inf when unbounded
	loOpen, hiOpen bool
}

// parseInterval parses a range tag.
func parseInterval(tag string) (interval, error) {
	var iv interval
	t := strings.TrimSpace(tag)
	if len(t) < 3 || !strings.ContainsRune("[(", rune(t[0])) || !strings.ContainsRune("])", rune(t[len(t)-1])) {
		return iv, fmt.Errorf("range %q: want [lo,hi] with ( or ) for open ends", tag)
	}
	iv.loOpen, iv.hiOpen = t[0] == '(', t[len(t)-1] == ')'
	lo, hi, ok := strings.Cut(t[1:len(t)-1], ",")
	if !ok {
		return iv, fmt.Errorf("range %q: no comma", tag)
	}
	bound := func(s string, inf float64) (float64, error) {
		if s = strings.TrimSpace(s); s == "" {
			return inf, nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) {
			return 0, fmt.Errorf("range %q: bound %q is not a number", tag, s)
		}
		return v, nil
	}
	var err error
	if iv.lo, err = bound(lo, math.Inf(-1)); err != nil {
		return iv, err
	}
	if iv.hi, err = bound(hi, math.Inf(1)); err != nil {
		return iv, err
	}
	if iv.lo > iv.hi {
		return iv, fmt.Errorf("range %q: empty", tag)
	}
	return iv, nil
}

func (iv interval) contains(v float64) bool {
	if v < iv.lo || v > iv.hi {
		return false
	}
	return !(iv.loOpen && v == iv.lo) && !(iv.hiOpen && v == iv.hi)
}

func (iv interval) String() string {
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	switch {
	case math.IsInf(iv.lo, -1) && math.IsInf(iv.hi, 1):
		return "any number"
	case math.IsInf(iv.hi, 1):
		if iv.loOpen {
			return "> " + num(iv.lo)
		}
		return "≥ " + num(iv.lo)
	case math.IsInf(iv.lo, -1):
		if iv.hiOpen {
			return "< " + num(iv.hi)
		}
		return "≤ " + num(iv.hi)
	}
	l, r := "[", "]"
	if iv.loOpen {
		l = "("
	}
	if iv.hiOpen {
		r = ")"
	}
	return l + num(iv.lo) + ", " + num(iv.hi) + r
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func isFloat(k reflect.Kind) bool { return k == reflect.Float32 || k == reflect.Float64 }

// structField finds the field of struct type t that YAML key name decodes
// into, looking through `yaml:",inline"` fields.
func structField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		n, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if n == "" && opts == "inline" && f.Type.Kind() == reflect.Struct {
			if ft, ok := structField(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if n == name && n != "-" {
			return f.Type, true
		}
	}
	return nil, false
}

// checkNode refuses, in the YAML value n that decodes into type t at key,
// a number with a fraction where an integer is wanted (the YAML decoder
// would truncate it: 1.5 → 1) and a non-finite number (.nan, .inf) where a
// float is wanted. Integral floats (2.0, 1e3) are exact and pass; keys
// that T does not have are left to the strict decoder. line: name the
// node's line in errors.
func (s *Schema[T]) checkNode(n *yaml.Node, t reflect.Type, key, what string, line bool) error {
	if n == nil {
		return nil
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(msg string) error {
		where := what
		if line {
			where = fmt.Sprintf("%s: line %d", what, n.Line)
		}
		return fmt.Errorf("%w: %s: %s = %s %s", s.err, where, key, n.Value, msg)
	}
	join := func(k string) string {
		if key == "" {
			return k
		}
		return key + "." + k
	}
	switch {
	case n.Kind == yaml.DocumentNode:
		for _, c := range n.Content {
			if err := s.checkNode(c, t, key, what, line); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for j := 0; j+1 < len(n.Content); j += 2 {
			if ft, ok := structField(t, n.Content[j].Value); ok {
				if err := s.checkNode(n.Content[j+1], ft, join(n.Content[j].Value), what, line); err != nil {
					return err
				}
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for j := 0; j+1 < len(n.Content); j += 2 {
			if err := s.checkNode(n.Content[j+1], t.Elem(), key, what, line); err != nil {
				return err
			}
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if err := s.checkNode(c, t.Elem(), key, what, line); err != nil {
				return err
			}
		}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && (isInt(t.Kind()) || isFloat(t.Kind())):
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil // the decoder reports it
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return bad("is not a finite number")
		}
		if isInt(t.Kind()) && f != math.Trunc(f) {
			return bad("is not an integer (a fraction is refused, not truncated)")
		}
	}
	return nil
}

// Check refuses a configuration in which a float (anywhere, in lists and
// maps too) is not finite, or a key with a `range` tag is outside its
// range; the error names the key and the value. Decode and Set already
// refuse fractions in integer keys and non-finite YAML numbers; Check also
// covers configurations built in Go.
func (s *Schema[T]) Check(c *T) error {
	return s.checkValue(reflect.ValueOf(c).Elem(), "")
}

func (s *Schema[T]) checkValue(v reflect.Value, key string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return s.checkValue(v.Elem(), key)
		}
		return nil
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			k := key
			if name != "" {
				if k != "" {
					k += "."
				}
				k += name
			} else if opts != "inline" {
				continue
			}
			if err := s.checkValue(v.Field(i), k); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if err := s.checkElem(v.Index(i), key); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if err := s.checkElem(it.Value(), key); err != nil {
				return err
			}
		}
		return nil
	}
	if err := s.checkElem(v, key); err != nil {
		return err
	}
	if iv, ok := s.ranges[key]; ok {
		var f float64
		switch {
		case isFloat(v.Kind()):
			f = v.Float()
		case v.CanInt():
			f = float64(v.Int())
		case v.CanUint():
			f = float64(v.Uint())
		default:
			return nil
		}
		if !iv.contains(f) {
			return fmt.Errorf("%w: %s = %s is out of range: want %s", s.err, key, formatNumber(v), iv)
		}
	}
	return nil
}

// checkElem refuses a non-finite float (a leaf, or a list or map element).
func (s *Schema[T]) checkElem(v reflect.Value, key string) error {
	if v.Kind() == reflect.Interface && !v.IsNil() {
		v = v.Elem()
	}
	if isFloat(v.Kind()) && (math.IsNaN(v.Float()) || math.IsInf(v.Float(), 0)) {
		return fmt.Errorf("%w: %s = %s is not a finite number", s.err, key, formatNumber(v))
	}
	if k := v.Kind(); k == reflect.Struct || k == reflect.Slice || k == reflect.Map || k == reflect.Array {
		return s.checkValue(v, key)
	}
	return nil
}

// formatNumber is v as the error messages show it (float32 without the
// digits of its float64 conversion).
func formatNumber(v reflect.Value) string {
	switch {
	case v.Kind() == reflect.Float32:
		return strconv.FormatFloat(v.Float(), 'g', -1, 32)
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case v.CanInt():
		return strconv.FormatInt(v.Int(), 10)
	case v.CanUint():
		return strconv.FormatUint(v.Uint(), 10)
	}
	return fmt.Sprint(v.Interface())
}
