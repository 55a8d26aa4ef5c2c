package scienceworld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
)

// The test binary doubles as a fake "java": with FAKE_SCIENCEWORLD_JVM set
// it behaves like `java -cp jar py4j.GatewayServer --die-on-broken-pipe 0`
// (prints its port, floods stdout on every step, exits when stdin closes).
func TestMain(m *testing.M) {
	switch os.Getenv("FAKE_SCIENCEWORLD_JVM") {
	case "":
		os.Exit(m.Run())
	case "gateway":
		if p := os.Getenv("FAKE_SCIENCEWORLD_LAUNCHES"); p != "" { // a line per JVM launch, for tests that count them
			if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintln(f, "launch")
				f.Close()
			}
		}
		args := strings.Join(os.Args[1:], " ")
		if !strings.Contains(args, "-cp ") || !strings.HasSuffix(args, "py4j.GatewayServer --die-on-broken-pipe 0") || !strings.HasPrefix(args, "-Xmx") {
			fmt.Fprintln(os.Stderr, "fake java: unexpected arguments:", args)
			os.Exit(2)
		}
		// Like java, resolve the class path from the working directory.
		for _, cp := range filepath.SplitList(os.Args[slices.Index(os.Args, "-cp")+1]) {
			if _, err := os.Stat(cp); err != nil {
				fmt.Fprintln(os.Stderr, "Error: Could not find or load main class py4j.GatewayServer:", err)
				os.Exit(1)
			}
		}
		g, err := newFakeGateway()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		g.spam, g.exitOnDie = 100_000, true
		// odd worlds for the trainer's tests: variations (comma-separated)
		// that start outside or in no named room, and a JVM that dies on
		// its Nth step call ("N:FILE": only the first JVM to create FILE)
		g.outside, g.noRoom = fakeVariations("FAKE_SCIENCEWORLD_OUTSIDE"), fakeVariations("FAKE_SCIENCEWORLD_NOROOM")
		if n, file, ok := strings.Cut(os.Getenv("FAKE_SCIENCEWORLD_DIE"), ":"); ok {
			g.dieStep, _ = strconv.Atoi(n)
			g.dieOnce = file
		}
		fmt.Println(g.ln.Addr().(*net.TCPAddr).Port)
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "noport":
		fmt.Println("Picked up _JAVA_OPTIONS: -Xss4m")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "crash":
		fmt.Fprintln(os.Stderr, "Error: Could not find or load main class py4j.GatewayServer")
		os.Exit(1)
	case "silent":
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(2)
}

// fakeVariations is the set of variations listed (comma-separated) in the
// environment variable name.
func fakeVariations(name string) map[int]bool {
	m := map[int]bool{}
	for _, f := range strings.Split(os.Getenv(name), ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			m[v] = true
		}
	}
	return m
}

var bg = context.Background()

func dialFake(t testing.TB, g *fakeGateway, opts environments.Options) *Env {
	t.Helper()
	conn, err := net.Dial("tcp", g.addr())
	require.NoError(t, err)
	e, err := newWithConn(bg, opts, conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func startFake(t testing.TB) *fakeGateway {
	t.Helper()
	g, err := newFakeGateway()
	require.NoError(t, err)
	t.Cleanup(g.close)
	return g
}

// ---- protocol ----

func TestEscaping(t *testing.T) {
	for _, s := range []string{"", "plain", "a\nb", "C:\\temp\\new", `\n is not a newline`, "cr\r\nlf", "\\\\\n\r\\", "tab\tand ünïcode"} {
		require.Equal(t, s, unescape(escape(s)), "%q", s)
		require.NotContains(t, escape(s), "\n")
		require.Equal(t, s, fakeUnescape(escape(s)), "client escaping must match the fake gateway's reading")
		require.Equal(t, s, unescape(fakeEscape(s)))
	}
	require.Equal(t, `a\\b\nc\r`, escape("a\\b\nc\r"))
}

func TestDecode(t *testing.T) {
	cases := []struct {
		line string
		want Value
	}{
		{"!yv", Value{Type: 'v'}},
		{"!yn", Value{Type: 'n'}},
		{"!ysline\\none", Value{Type: 's', Str: "line\none"}},
		{"ys", Value{Type: 's'}}, // older py4j: no "!"
		{"!yi-42", Value{Type: 'i', Int: -42, Num: -42}},
		{"!yL12345678901", Value{Type: 'L', Int: 12345678901, Num: 12345678901}},
		{"!yd0.125", Value{Type: 'd', Num: 0.125}},
		{"!yd1.0E-4", Value{Type: 'd', Num: 1e-4}}, // Java's Double.toString
		{"!yd-Infinity", Value{Type: 'd', Num: math.Inf(-1)}},
		{"!ybtrue", Value{Type: 'b', Bool: true}},
		{"!ybfalse", Value{Type: 'b'}},
		{"!yjaGk=", Value{Type: 'j', Str: "hi"}},
		{"!yro12", Value{Type: 'r', Ref: "o12"}},
		{"!ylo3", Value{Type: 'l', Ref: "o3"}},
		{"!yao4", Value{Type: 'a', Ref: "o4"}},
	}
	for _, c := range cases {
		got, err := decode(c.line, "x.m")
		require.NoError(t, err, c.line)
		require.Equal(t, c.want, got, c.line)
	}
	_, err := decode("!xsjava.lang.Exception: no\\nmore", "pi.step")
	var je *JavaError
	require.ErrorAs(t, err, &je)
	require.ErrorIs(t, err, ErrJava)
	require.Equal(t, "java.lang.Exception: no\nmore", je.Msg)
	require.Contains(t, err.Error(), "pi.step")
	// A fatal gateway error ("z") and a bare "x" are errors too, not protocol faults.
	_, err = decode("!zsjava.lang.OutOfMemoryError: Java heap space", "pi.step")
	require.ErrorAs(t, err, &je)
	require.Contains(t, je.Msg, "OutOfMemoryError")
	_, err = decode("!x", "pi.step")
	require.ErrorIs(t, err, ErrJava)
	_, err = decode("!xro7", "pi.step")
	require.ErrorAs(t, err, &je)
	require.True(t, je.IsRef)
	require.Equal(t, "o7", je.Msg)
	for _, bad := range []string{"", "!", "!q", "!yiabc", "!yl", "!yd1.2.3"} {
		_, err := decode(bad, "x.m")
		require.Error(t, err, "%q", bad)
		require.ErrorIs(t, err, errProtocol, "%q", bad)
	}
	// Arguments as py4j's get_command_part writes them (Java parses booleans
	// case-insensitively, so "btrue" = Python's "bTrue").
	for _, c := range []struct {
		a    any
		want string
	}{
		{"a\nb\\", `sa\nb\\`}, {"", "s"}, {3, "i3"}, {-2147483648, "i-2147483648"}, {2147483648, "L2147483648"},
		{1 << 40, "L1099511627776"}, {int32(-5), "i-5"}, {int64(4), "L4"}, {0.5, "d0.5"}, {1e-7, "d1e-07"}, {math.Inf(1), "dInfinity"}, {math.Inf(-1), "d-Infinity"}, {math.NaN(), "dNaN"},
		{true, "btrue"}, {false, "bfalse"}, {nil, "n"}, {Ref("o1"), "ro1"},
	} {
		s, err := encodeArg(c.a)
		require.NoError(t, err)
		require.Equal(t, c.want, s, "%#v", c.a)
	}
	_, err = encodeArg(struct{}{})
	require.Error(t, err)
}

func TestListsAndRelease(t *testing.T) {
	g := startFake(t)
	for _, noJoin := range []bool{false, true} {
		g.mu.Lock()
		g.noJoin = noJoin
		g.mu.Unlock()
		conn, err := net.Dial("tcp", g.addr())
		require.NoError(t, err)
		c := newClient(conn, 5*time.Second)
		before := g.callsOf("get")
		for _, want := range [][]string{{"a", "b\\c", ""}, {}, {"only"}} {
			g.mu.Lock()
			id := g.put(want)
			g.mu.Unlock()
			got, err := c.StringsJoined(bg, Ref(id))
			require.NoError(t, err)
			if len(want) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, want, got)
			}
			g.mu.Lock()
			require.Contains(t, g.released, id, "list must be released")
			g.mu.Unlock()
		}
		gets := g.callsOf("get") - before
		if noJoin {
			require.Equal(t, 4, gets, "without String.join the client reads element by element")
		} else {
			require.Zero(t, gets, "String.join reads a list in one call")
		}
		// An element with a newline falls back to element-wise reading.
		g.mu.Lock()
		id := g.put([]string{"two\nlines", "x"})
		g.mu.Unlock()
		got, err := c.StringsJoined(bg, Ref(id))
		require.NoError(t, err)
		require.Equal(t, []string{"two\nlines", "x"}, got)

		g.mu.Lock()
		ints := g.put([]int{3, 1, 4})
		g.mu.Unlock()
		n, err := c.Ints(bg, Ref(ints))
		require.NoError(t, err)
		require.Equal(t, []int{3, 1, 4}, n)
		_, err = c.Ints(bg, Ref("o999999"))
		require.ErrorIs(t, err, ErrJava)
		require.NoError(t, c.Close())
		_, err = c.Call(bg, "o1", "size")
		require.ErrorIs(t, err, environments.ErrClosed)
	}
	require.Equal(t, 0, g.liveObjects()-countWorlds(g), "every list handed out was released")
}

func countWorlds(g *fakeGateway) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, o := range g.objs {
		if _, ok := o.(*fakeWorld); ok {
			n++
		}
	}
	return n
}

func TestJavaExceptionCarriesTrace(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	_, err = e.Step(bg, "throw")
	require.ErrorIs(t, err, ErrJava)
	require.Contains(t, err.Error(), "IllegalStateException: boom")
	require.NotErrorIs(t, err, environments.ErrSimulatorDied)
	// The connection is still in step after an error answer.
	r, err := e.Step(bg, "look around")
	require.NoError(t, err)
	require.Equal(t, fakeLook, r.Observation)
	_, err = e.call(bg, "noSuchMethod")
	require.ErrorIs(t, err, ErrJava)
	require.True(t, isMissingMethod(err))
}

func TestArgumentsArriveIntact(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{Simplifications: "easy"})
	_, err := e.Reset(bg, "power-component", 7, 0)
	require.NoError(t, err)
	odd := "say \\n literally,\nthen a newline\r and a backslash \\"
	_, err = e.Step(bg, odd)
	require.NoError(t, err)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, []any{"power-component", 7, "easy", false}, g.args[slices.Index(g.calls, "load")])
	require.Equal(t, []any{odd}, g.args[len(g.calls)-4], "step argument")
}

// ---- wrapper semantics ----

func TestResetLooksAround(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{})
	_, err := e.Step(bg, "look around")
	require.ErrorIs(t, err, environments.ErrNotReset)
	_, err = e.ValidActions(bg)
	require.ErrorIs(t, err, environments.ErrNotReset)

	res, err := e.Reset(bg, "power-component", 0, 42)
	require.NoError(t, err)
	require.Equal(t, fakeLook, res.Observation, "reset plays look around and keeps newlines, CR and backslashes")
	require.Equal(t, fakeDesc, res.TaskDescription)
	require.Equal(t, 1, res.Info["moves"])
	require.Equal(t, 1, g.callsOf("load"))
	require.Equal(t, []string{"load", "step", "getScore", "getCompleted", "getNumMoves", "getTaskDescription"}, g.calls[:6])

	// Same task and variation again: a fresh load, never the simulator's
	// reset() (which would regenerate a gold path asked for earlier).
	_, err = e.Reset(bg, "3-1", 0, 0) // the id works too
	require.NoError(t, err)
	require.Equal(t, 2, g.callsOf("load"))
	_, err = e.Reset(bg, "power-component", 1, 0)
	require.NoError(t, err)
	require.Equal(t, 3, g.callsOf("load"))
	require.Zero(t, g.callsOf("reset"))

	_, err = e.Reset(bg, "no-such-task", 0, 0)
	require.ErrorIs(t, err, environments.ErrUnknownTask)
	_, err = e.Reset(bg, "power-component", 20, 0)
	require.ErrorIs(t, err, environments.ErrBadVariation)
	_, err = e.Reset(bg, "boil", 0, 0) // the fake refuses it with an error string
	require.Error(t, err)
	require.Contains(t, err.Error(), "unknown task in the fake")
	require.Equal(t, 4, g.callsOf("load"), "invalid names never reach the simulator")
}

func TestScoreRewardDone(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	wantScore := []float64{12, 38, 50, 100} // round half to even: 12.5 -> 12, 37.5 -> 38
	wantReward := []float64{12, 26, 12, 50}
	r, err := e.Step(bg, "inventory")
	require.NoError(t, err)
	require.Equal(t, 0.0, r.Reward)
	require.False(t, r.Done)
	for i, a := range fakeGold {
		r, err = e.Step(bg, a)
		require.NoError(t, err)
		require.Equal(t, wantScore[i], e.Score(), a)
		require.Equal(t, wantReward[i], r.Reward, a)
		require.Equal(t, i == len(fakeGold)-1, r.Done, a)
		require.Equal(t, i == len(fakeGold)-1, r.Info["completed"])
		require.Equal(t, i+3, r.Info["moves"])
	}
	_, err = e.Step(bg, "look around")
	require.ErrorIs(t, err, environments.ErrEpisodeDone)
	require.Equal(t, 12, Score(0.125))
	require.Equal(t, 38, Score(0.375))
	require.Equal(t, -100, Score(-1))
}

func TestNegativeScoreEnds(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	_, err = e.Step(bg, fakeGold[0])
	require.NoError(t, err)
	r, err := e.Step(bg, "focus on agent")
	require.NoError(t, err)
	require.True(t, r.Done)
	require.Equal(t, -100.0, e.Score())
	require.Equal(t, -112.0, r.Reward)
	require.Equal(t, false, r.Info["completed"])
	require.NotContains(t, r.Info, environments.InfoTruncated)
}

func TestStepLimit(t *testing.T) {
	g := startFake(t)
	// The wrapper ends when moves > limit; moves count the reset's look around.
	e := dialFake(t, g, environments.Options{StepLimit: 3})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	for i, want := range []bool{false, false, true} {
		r, err := e.Step(bg, "inventory")
		require.NoError(t, err)
		require.Equal(t, want, r.Done, "step %d", i+1)
		require.Equal(t, want, r.Info[environments.InfoTruncated] == true, "the limit, not the task, ended it")
	}
	// Input the simulator cannot parse costs no move: it never reaches the limit.
	e3 := dialFake(t, g, environments.Options{StepLimit: 3})
	_, err = e3.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	for range 10 {
		r, err := e3.Step(bg, "xyzzy")
		require.NoError(t, err)
		require.False(t, r.Done)
		require.Equal(t, 1, r.Info["moves"])
	}
	// power-component's EMPO² limit is 30 without an override.
	e2 := dialFake(t, g, environments.Options{})
	_, err = e2.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	require.Equal(t, 30, e2.limit)
	tasks, _ := Tasks(environments.Options{})
	require.Len(t, tasks, 30)
	limits := map[string]int{}
	total := 0
	for _, tk := range tasks {
		limits[tk.Name] = tk.StepLimit
		total += tk.Variations
		require.Equal(t, tk.Variations, len(tk.Train)+len(tk.Dev)+len(tk.TestVars), tk.Name)
	}
	require.Equal(t, map[string]int{"boil": 100, "melt": 80, "freeze": 80, "measure-melting-point-known-substance": 120, "grow-fruit": 60, "chemistry-mix": 60, "find-animal": 30}, map[string]int{
		"boil": limits["boil"], "melt": limits["melt"], "freeze": limits["freeze"], "measure-melting-point-known-substance": limits["measure-melting-point-known-substance"],
		"grow-fruit": limits["grow-fruit"], "chemistry-mix": limits["chemistry-mix"], "find-animal": limits["find-animal"]})
	require.Equal(t, 7207, total, "ScienceWorld's 30 tasks have 7207 variations in all")
}

func TestActionCorrection(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{Extra: map[string]string{environments.ExtraCorrectActions: "jaccard"}})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	r, err := e.Step(bg, "open the door to the workshop please")
	require.NoError(t, err)
	require.Equal(t, "open the door to the workshop please", r.Info["corrected_from"])
	require.Equal(t, 12.0, e.Score())
	r, err = e.Step(bg, "go to workshop")
	require.NoError(t, err)
	require.NotContains(t, r.Info, "corrected_from")
	require.Equal(t, 38.0, e.Score())
}

func TestValidActionsAndGold(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{Extra: map[string]string{ExtraInfo: "full"}})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	va, err := e.ValidActions(bg)
	require.NoError(t, err)
	require.Equal(t, []string{"look around", "inventory", "task", "wait", "wait1", "look at agent", "focus on agent", "open door to workshop"}, va)
	r, err := e.Step(bg, "inventory")
	require.NoError(t, err)
	require.Equal(t, "In your inventory, you see:\n\tan orange", r.Info["inv"])
	require.Equal(t, fakeLook, r.Info["look"])
	require.Equal(t, fakeDesc, r.Info["taskDesc"])
	require.Contains(t, r.Info["valid"], "look around")

	gold, err := e.GoldActions(bg, "power-component", 0)
	require.NoError(t, err)
	require.Equal(t, fakeGold, gold)
	_, err = e.Step(bg, "look around")
	require.ErrorIs(t, err, environments.ErrNotReset, "gold generation replaces the episode")
	for range 2 {
		_, err = e.Reset(bg, "power-component", 0, 0)
		require.NoError(t, err)
		g.mu.Lock()
		last := g.args[slices.Index(g.calls, "getGoldActionSequence")+1:]
		g.mu.Unlock()
		require.Equal(t, []any{"power-component", 0, "", false}, last[len(last)-6], "after gold generation Reset loads without gold")
	}
	require.Equal(t, 1, g.goldRuns, "the gold path is generated once, not again on every reset")
	require.Zero(t, g.callsOf("reset"))
	g.mu.Lock()
	last := g.args[slices.Index(g.calls, "getGoldActionSequence")-1]
	g.mu.Unlock()
	require.Equal(t, true, last[3], "gold generation asked for")
	_, err = e.GoldActions(bg, "power-component", 99)
	require.ErrorIs(t, err, environments.ErrBadVariation)

	names, err := e.TaskNames(bg)
	require.NoError(t, err)
	require.Len(t, names, 30)
	n, err := e.MaxVariations(bg, "boil")
	require.NoError(t, err)
	require.Equal(t, 30, n)
	tr, err := e.Split(bg, environments.Train)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, tr)
	simps, err := e.PossibleSimplifications(bg)
	require.NoError(t, err)
	require.ElementsMatch(t, Simplifications, simps)
	require.Zero(t, g.liveObjects()-countWorlds(g), "every list was released")
}

func TestMultiAgentJarAndOldPy4J(t *testing.T) {
	g := startFake(t)
	g.multi, g.bangless = true, true
	e := dialFake(t, g, environments.Options{})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	for _, a := range fakeGold {
		_, err = e.Step(bg, a)
		require.NoError(t, err)
	}
	require.Equal(t, 100.0, e.Score())
	require.True(t, e.agentIdx)
}

func TestSimplificationChecks(t *testing.T) {
	_, err := New(environments.Options{Simplifications: "flying"})
	require.ErrorIs(t, err, environments.ErrNotSupported)
	g := startFake(t)
	e := dialFake(t, g, environments.Options{Simplifications: "openDoors,noElectricalAction"})
	_, err = e.Reset(bg, "power-component", 0, 0)
	require.ErrorIs(t, err, environments.ErrNotSupported, "electrical tasks need electrical actions")
}

// ---- failures never hang ----

func TestDeadGateway(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{Extra: map[string]string{ExtraTimeout: "10s"}})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	start := time.Now()
	_, err = e.Step(bg, "die")
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	require.Less(t, time.Since(start), 5*time.Second)
	_, err = e.Step(bg, "look around")
	require.ErrorIs(t, err, environments.ErrSimulatorDied, "a dead simulator stays dead")
	require.NoError(t, e.Close())
	_, err = e.Step(bg, "look around")
	require.ErrorIs(t, err, environments.ErrClosed)
}

func TestHungGatewayTimesOut(t *testing.T) {
	g := startFake(t)
	e := dialFake(t, g, environments.Options{Extra: map[string]string{ExtraTimeout: "300ms"}})
	_, err := e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	start := time.Now()
	_, err = e.Step(bg, "hang")
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	require.Contains(t, err.Error(), "no answer within 300ms")
	require.Less(t, time.Since(start), 3*time.Second)

	// A context deadline also bounds a call.
	e2 := dialFake(t, g, environments.Options{})
	_, err = e2.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	_, err = e2.Step(ctx, "hang")
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A context that is already over sends nothing and breaks nothing.
	e3 := dialFake(t, g, environments.Options{})
	_, err = e3.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	done, cancel3 := context.WithCancel(bg)
	cancel3()
	_, err = e3.Step(done, fakeGold[0])
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, environments.ErrSimulatorDied)
	r, err := e3.Step(bg, fakeGold[0])
	require.NoError(t, err)
	require.Equal(t, 12.0, r.Reward, "the cancelled step was not played")
	_, err = durationExtra(environments.Options{Extra: map[string]string{ExtraTimeout: "soon"}}, ExtraTimeout, time.Second)
	require.Error(t, err)
}

// ---- the JVM process (the test binary plays java) ----

func fakeJavaOpts(t *testing.T, mode string) environments.Options {
	t.Helper()
	t.Setenv("FAKE_SCIENCEWORLD_JVM", mode)
	jar := filepath.Join(t.TempDir(), "scienceworld.jar")
	require.NoError(t, os.WriteFile(jar, []byte("not really a jar"), 0o644))
	return environments.Options{Jar: jar, Extra: map[string]string{ExtraJava: os.Args[0], ExtraStartupTimeout: "20s", ExtraTimeout: "20s"}}
}

func TestJVMProcess(t *testing.T) {
	opts := fakeJavaOpts(t, "gateway")
	spec, err := environments.Lookup(Name)
	require.NoError(t, err)
	env, err := spec.New(opts)
	require.NoError(t, err)
	e := env.(*Env)
	_, err = e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	// Each step floods ~100 kB of debug text on stdout (more than a pipe
	// holds): without draining, the fake JVM would block and the step time out.
	for _, a := range fakeGold {
		_, err = e.Step(bg, a)
		require.NoError(t, err)
	}
	require.Equal(t, 100.0, e.Score())
	e.proc.mu.Lock()
	drained := e.proc.outBytes
	e.proc.mu.Unlock()
	require.Greater(t, drained, int64(300_000))
	require.NoError(t, e.Close())
	select {
	case <-e.proc.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the JVM did not exit after Close")
	}
	require.NoError(t, e.Close())
}

func TestRelativeJarPath(t *testing.T) {
	// The JVM runs in the jar's folder; a relative jar path must still work.
	opts := fakeJavaOpts(t, "gateway")
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, opts.Jar)
	require.NoError(t, err)
	require.False(t, filepath.IsAbs(rel))
	opts.Jar = rel
	e, err := New(opts)
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
}

func TestJVMDies(t *testing.T) {
	e, err := New(fakeJavaOpts(t, "gateway"))
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	_, err = e.Step(bg, "die")
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	<-e.proc.exited
	_, err = e.Step(bg, "look around")
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
}

func TestJVMStartFailures(t *testing.T) {
	_, err := New(fakeJavaOpts(t, "crash"))
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	require.Contains(t, err.Error(), "Could not find or load main class", "stderr is reported")
	require.Contains(t, err.Error(), "classpath option", "a jar without py4j gets a hint")

	// Extra class path entries are passed on (the fake java checks each exists).
	o := fakeJavaOpts(t, "gateway")
	o.Extra[ExtraClasspath] = filepath.Join(t.TempDir(), "missing-py4j.jar")
	_, err = New(o)
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	require.Contains(t, err.Error(), "missing-py4j.jar")
	py4jJar := filepath.Join(t.TempDir(), "py4j0.10.9.9.jar")
	require.NoError(t, os.WriteFile(py4jJar, nil, 0o644))
	o.Extra[ExtraClasspath] = py4jJar
	e, err := New(o)
	require.NoError(t, err)
	require.NoError(t, e.Close())

	_, err = New(fakeJavaOpts(t, "noport"))
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	require.Contains(t, err.Error(), "Picked up _JAVA_OPTIONS")

	opts := fakeJavaOpts(t, "silent")
	opts.Extra[ExtraStartupTimeout] = "300ms"
	start := time.Now()
	_, err = New(opts)
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	require.Less(t, time.Since(start), 5*time.Second)

	t.Setenv(JarEnv, "")
	_, err = New(environments.Options{})
	require.ErrorIs(t, err, ErrNoJar)
	_, err = New(environments.Options{Jar: filepath.Join(t.TempDir(), "missing.jar")})
	require.ErrorIs(t, err, ErrNoJar)
	_, err = New(environments.Options{Jar: t.TempDir()})
	require.ErrorIs(t, err, ErrNoJar)
	o = fakeJavaOpts(t, "gateway")
	o.Extra[ExtraJava] = filepath.Join(t.TempDir(), "no-java-here")
	_, err = New(o)
	require.Error(t, err)
}

func TestConcurrentPoolOfJVMs(t *testing.T) {
	opts := fakeJavaOpts(t, "gateway")
	p, err := environments.NewPool(Name, opts, 3)
	require.NoError(t, err)
	defer p.Close()
	err = p.Map(bg, 6, func(ctx context.Context, i int, env environments.Env) error {
		if _, err := env.Reset(ctx, "power-component", i%3, int64(i)); err != nil {
			return err
		}
		for _, a := range fakeGold {
			if _, err := env.Step(ctx, a); err != nil {
				return err
			}
		}
		if env.Score() != 100 {
			return errors.New("episode did not reach 100")
		}
		return nil
	})
	require.NoError(t, err)
}

func TestHungJVMIsKilled(t *testing.T) {
	opts := fakeJavaOpts(t, "gateway")
	opts.Extra[ExtraTimeout] = "500ms"
	e, err := New(opts)
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Reset(bg, "power-component", 0, 0)
	require.NoError(t, err)
	_, err = e.Step(bg, "hang")
	require.ErrorIs(t, err, environments.ErrSimulatorDied)
	select {
	case <-e.proc.exited: // killed without waiting for Close
	case <-time.After(5 * time.Second):
		t.Fatal("a hung JVM was left running")
	}
}

// TestJVMMemoryFlags: every JVM starts with a capped heap and the
// small-footprint flags (not the JVM's machine-sized defaults), the flags
// can be replaced, a malformed heap size fails before anything starts, and
// a real java accepts the default flags.
func TestJVMMemoryFlags(t *testing.T) {
	flagsOf := func(e *Env) []string {
		args := e.proc.cmd.Args[1:]
		return args[:slices.Index(args, "-cp")]
	}
	e, err := New(fakeJavaOpts(t, "gateway"))
	require.NoError(t, err)
	require.Equal(t, []string{"-Xmx512m", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData"}, flagsOf(e))
	require.NoError(t, e.Close())

	o := fakeJavaOpts(t, "gateway")
	o.Extra[ExtraHeap], o.Extra[ExtraJVMFlags] = "1G", "-Xss2m"
	e, err = New(o)
	require.NoError(t, err)
	require.Equal(t, []string{"-Xmx1G", "-Xss2m"}, flagsOf(e))
	require.NoError(t, e.Close())
	o.Extra[ExtraJVMFlags] = "" // present and empty: no flags besides -Xmx
	e, err = New(o)
	require.NoError(t, err)
	require.Equal(t, []string{"-Xmx1G"}, flagsOf(e))
	require.NoError(t, e.Close())

	for _, bad := range []string{"lots", "1.5g", "-1m", "0", "m", "99999999999t"} {
		o.Extra[ExtraHeap] = bad
		_, err = New(o)
		require.ErrorContains(t, err, "xmx", bad)
	}
	for in, want := range map[string]int64{"512m": 512 << 20, "1g": 1 << 30, "2G": 2 << 30, "64k": 64 << 10, "1048576": 1 << 20, "1t": 1 << 40} {
		got, err := ParseJavaSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}

	// The pool's memory line: the heap cap per JVM.
	spec, err := environments.Lookup(Name)
	require.NoError(t, err)
	pm := environments.PoolMemory(spec, environments.Options{}, 8)
	require.Equal(t, int64(512<<20), pm.PerInstance)
	require.Equal(t, int64(4<<30), pm.Total())
	require.Contains(t, pm.String(), "8 instances × 512 MiB (JVM heap cap -Xmx512m")
	require.Contains(t, pm.String(), "≈ 4.0 GiB")
	pm = environments.PoolMemory(spec, environments.Options{Extra: map[string]string{ExtraHeap: "2g"}}, 64)
	require.Equal(t, int64(128<<30), pm.Total())

	// A real JVM, where one is installed, accepts the default flags.
	java, err := exec.LookPath("java")
	if err != nil {
		t.Log("no java on PATH: the flags were not checked against a real JVM")
		return
	}
	args, err := jvmArgs(environments.Options{})
	require.NoError(t, err)
	out, err := exec.Command(java, append(args, "-version")...).CombinedOutput()
	require.NoError(t, err, "java %v -version: %s", args, out)
}

// TestDefaultsAreTheRecipe: ScienceWorld asks runs for the EMPO² recipe's
// action correction and success rule (score above 70).
func TestDefaultsAreTheRecipe(t *testing.T) {
	spec, err := environments.Lookup(Name)
	require.NoError(t, err)
	require.True(t, spec.Defaults.CorrectActions)
	require.Equal(t, 71.0, spec.Defaults.Success(), "success = score > 70 on whole-number scores")
	require.Greater(t, spec.Defaults.Success(), 70.0)
}
