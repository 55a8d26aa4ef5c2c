package scienceworld

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/empo2/empo2/environments"
)

// This file is a small client for py4j's text protocol (the protocol the
// official Python wrapper speaks to the ScienceWorld JVM). A command is a
// few lines ending with "e"; the answer is one line:
//
//	call         c\n<target id>\n<method>\n<arg>...e\n
//	constructor  i\n<class>\n<arg>...e\n
//	release      m\nd\n<object id>\ne\n
//	exception    p\nr<object id>\ne\n   (the stack trace of a Java exception)
//
// Arguments are one line each: s<escaped string>, i<int>, L<long>,
// d<double>, b<true|false>, n (null) or r<object id>. Answers start with
// "!" (older py4j omits it), then "y" and a typed value (v void, n null, s,
// i, L, d, D, b, j base64 bytes, or an object id for r, l list, a map,
// h set, t array, g iterator) or "x" (or "z", fatal) and an error: "s" and
// the escaped message, or "r" and the id of a Java exception object.

// ErrJava is returned (wrapped, as *JavaError) when the JVM answers a call
// with an error: a Java exception or a py4j protocol error such as an
// unknown method.
var ErrJava = errors.New("scienceworld: java error")

// JavaError is an error answer from the gateway.
type JavaError struct {
	Call  string // target.method
	Msg   string // the error text or stack trace
	IsRef bool   // a Java exception object (as opposed to a py4j error)
}

func (e *JavaError) Error() string {
	return fmt.Sprintf("scienceworld: %s: %s", e.Call, firstLine(e.Msg))
}

func (e *JavaError) Unwrap() error { return ErrJava }

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// Ref is a reference to a Java object held by the gateway.
type Ref string

// Value is one decoded answer.
type Value struct {
	Type byte // v, n, s, i, L, d, D, b, j, or a reference type (r, l, a, h, t, g, …)
	Str  string
	Int  int64
	Num  float64
	Bool bool
	Ref  Ref
}

// IsRef reports whether the value is an object reference.
func (v Value) IsRef() bool { return v.Ref != "" }

func escape(s string) string {
	if !strings.ContainsAny(s, "\\\r\n") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\r':
			b.WriteString(`\r`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case '\\':
			b.WriteByte('\\')
		default:
			b.WriteByte(c)
			continue
		}
		i++
	}
	return b.String()
}

// encodeArg renders one argument line (without the newline).
func encodeArg(a any) (string, error) {
	switch v := a.(type) {
	case nil:
		return "n", nil
	case string:
		return "s" + escape(v), nil
	case bool:
		return "b" + strconv.FormatBool(v), nil
	case int:
		if v >= -1<<31 && v < 1<<31 {
			return "i" + strconv.Itoa(v), nil
		}
		return "L" + strconv.Itoa(v), nil
	case int32:
		return "i" + strconv.FormatInt(int64(v), 10), nil
	case int64:
		return "L" + strconv.FormatInt(v, 10), nil
	case float64:
		switch {
		case math.IsInf(v, 1): // Java's spelling, as py4j's encode_float writes it
			return "dInfinity", nil
		case math.IsInf(v, -1):
			return "d-Infinity", nil
		}
		return "d" + strconv.FormatFloat(v, 'g', -1, 64), nil // NaN is "NaN" in both
	case Ref:
		return "r" + string(v), nil
	}
	return "", fmt.Errorf("scienceworld: cannot send a %T through py4j", a)
}

// decode parses an answer line (without the newline).
func decode(line, call string) (Value, error) {
	line = strings.TrimPrefix(line, "!")
	if line == "" {
		return Value{}, fmt.Errorf("%w: empty answer to %s", errProtocol, call)
	}
	if line[0] == 'x' || line[0] == 'z' { // z: a fatal error (the gateway's own failure)
		je := &JavaError{Call: call}
		if len(line) > 1 {
			switch line[1] {
			case 's':
				je.Msg = unescape(line[2:])
			case 'r':
				je.Msg, je.IsRef = line[2:], true
			default:
				je.Msg = line[1:]
			}
		}
		return Value{}, je
	}
	if line[0] != 'y' || len(line) < 2 {
		return Value{}, fmt.Errorf("%w: bad answer %q to %s", errProtocol, line, call)
	}
	v := Value{Type: line[1]}
	body := line[2:]
	var err error
	switch v.Type {
	case 'v', 'n':
	case 's':
		v.Str = unescape(body)
	case 'i', 'L':
		v.Int, err = strconv.ParseInt(body, 10, 64)
		v.Num = float64(v.Int)
	case 'd', 'D':
		v.Num, err = strconv.ParseFloat(body, 64)
	case 'b':
		v.Bool = strings.EqualFold(body, "true")
	case 'j':
		var raw []byte
		raw, err = base64.StdEncoding.DecodeString(body)
		v.Str = string(raw)
	default: // r, l, a, h, t, g, … : object references
		if body == "" {
			return v, fmt.Errorf("%w: reference answer without id to %s", errProtocol, call)
		}
		v.Ref = Ref(body)
	}
	if err != nil {
		return v, fmt.Errorf("%w: %s answered %q: %v", errProtocol, call, line, err)
	}
	return v, nil
}

var errProtocol = errors.New("scienceworld: py4j protocol error")

// client speaks py4j over one TCP connection. It is safe for concurrent
// use, one command at a time.
type client struct {
	mu      sync.Mutex
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration // per command
	broken  error         // set after an I/O failure: the stream is out of step
	dead    func() error  // optional: why the peer process died, if it did
	onFail  func()        // optional: called once when the connection breaks
}

func newClient(conn net.Conn, timeout time.Duration) *client {
	return &client{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), w: bufio.NewWriter(conn), timeout: timeout}
}

// roundTrip sends one command (its lines, "e" appended) and reads the answer.
func (c *client) roundTrip(ctx context.Context, call string, lines ...string) (Value, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return Value{}, c.broken
	}
	if err := ctx.Err(); err != nil { // nothing sent yet: the stream stays usable
		return Value{}, err
	}
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return Value{}, c.fail(call, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Now()) })
	defer stop()
	for _, l := range lines {
		c.w.WriteString(l)
		c.w.WriteByte('\n')
	}
	c.w.WriteString("e\n")
	if err := c.w.Flush(); err != nil {
		return Value{}, c.fail(call, ctxErr(ctx, err))
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return Value{}, c.fail(call, ctxErr(ctx, err))
	}
	return decode(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), call)
}

func ctxErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}

// fail marks the connection unusable: after a failed read or write the
// answers would no longer match the questions.
func (c *client) fail(call string, err error) error {
	why := "the connection failed"
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		why = "the gateway closed the connection"
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		why = "the call's context ended"
	case errors.As(err, &ne) && ne.Timeout():
		why = fmt.Sprintf("no answer within %s", c.timeout)
	}
	if c.dead != nil {
		if d := c.dead(); d != nil {
			why = d.Error()
		}
	}
	c.broken = fmt.Errorf("%w: %s during %s: %w", environments.ErrSimulatorDied, why, call, err)
	_ = c.conn.Close()
	if c.onFail != nil {
		c.onFail()
	}
	return c.broken
}

// Call invokes target.method(args...).
func (c *client) Call(ctx context.Context, target Ref, method string, args ...any) (Value, error) {
	lines := make([]string, 0, 3+len(args))
	lines = append(lines, "c", string(target), method)
	for _, a := range args {
		s, err := encodeArg(a)
		if err != nil {
			return Value{}, err
		}
		lines = append(lines, s)
	}
	v, err := c.roundTrip(ctx, string(target)+"."+method, lines...)
	return v, c.explain(ctx, err)
}

// New constructs a Java object of class with args.
func (c *client) New(ctx context.Context, class string, args ...any) (Ref, error) {
	lines := []string{"i", class}
	for _, a := range args {
		s, err := encodeArg(a)
		if err != nil {
			return "", err
		}
		lines = append(lines, s)
	}
	v, err := c.roundTrip(ctx, "new "+class, lines...)
	if err != nil {
		return "", c.explain(ctx, err)
	}
	if !v.IsRef() {
		return "", fmt.Errorf("%w: constructor of %s answered type %q", errProtocol, class, v.Type)
	}
	return v.Ref, nil
}

// Release tells the gateway it may forget an object.
func (c *client) Release(ctx context.Context, r Ref) error {
	_, err := c.roundTrip(ctx, "release "+string(r), "m", "d", string(r))
	return err
}

// explain fetches the stack trace of a Java exception answer (best effort).
func (c *client) explain(ctx context.Context, err error) error {
	var je *JavaError
	if !errors.As(err, &je) || !je.IsRef {
		return err
	}
	ref := je.Msg
	if v, e := c.roundTrip(ctx, "exception "+ref, "p", "r"+ref); e == nil && v.Str != "" {
		je.Msg = v.Str
	}
	_ = c.Release(ctx, Ref(ref))
	return je
}

// Strings reads a java.util.List of strings and releases it.
func (c *client) Strings(ctx context.Context, list Ref) ([]string, error) {
	vals, err := c.list(ctx, list)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		if v.Type != 's' && v.Type != 'n' {
			return nil, fmt.Errorf("%w: list element %d has type %q, want a string", errProtocol, i, v.Type)
		}
		out[i] = v.Str
	}
	return out, nil
}

// Ints reads a java.util.List of integers and releases it.
func (c *client) Ints(ctx context.Context, list Ref) ([]int, error) {
	vals, err := c.list(ctx, list)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(vals))
	for i, v := range vals {
		if v.Type != 'i' && v.Type != 'L' {
			return nil, fmt.Errorf("%w: list element %d has type %q, want an integer", errProtocol, i, v.Type)
		}
		out[i] = int(v.Int)
	}
	return out, nil
}

func (c *client) list(ctx context.Context, list Ref) ([]Value, error) {
	n, err := c.Call(ctx, list, "size")
	if err != nil {
		return nil, err
	}
	if n.Type != 'i' || n.Int < 0 {
		return nil, fmt.Errorf("%w: size() of a list answered %q", errProtocol, n.Type)
	}
	out := make([]Value, 0, n.Int)
	for i := range int(n.Int) {
		v, err := c.Call(ctx, list, "get", i)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, c.Release(ctx, list)
}

func (c *client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = environments.ErrClosed
	}
	return c.conn.Close()
}

// StringsJoined reads a list of strings in one round trip by asking the JVM
// for String.join("\n", list); it falls back to Strings (one call per
// element) when the static call fails or an element holds a newline. The
// list is released either way.
func (c *client) StringsJoined(ctx context.Context, list Ref) ([]string, error) {
	v, err := c.Call(ctx, "z:java.lang.String", "join", "\n", list)
	if err != nil || v.Type != 's' {
		if errors.Is(err, environments.ErrSimulatorDied) {
			return nil, err
		}
		return c.Strings(ctx, list)
	}
	n, err := c.Call(ctx, list, "size")
	if err != nil {
		return nil, err
	}
	var out []string
	if v.Str != "" || n.Int > 0 {
		out = strings.Split(v.Str, "\n")
	}
	if int64(len(out)) != n.Int { // an element had a newline: do it the slow way
		return c.Strings(ctx, list)
	}
	return out, c.Release(ctx, list)
}
