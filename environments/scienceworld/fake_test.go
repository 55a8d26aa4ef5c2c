package scienceworld

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fakeGateway is a py4j gateway written in Go with a scripted little world
// behind a fake PythonInterface. It speaks the wire protocol independently
// of the client under test (its own parsing and escaping).
type fakeGateway struct {
	ln net.Listener

	mu        sync.Mutex
	objs      map[string]any // id -> *fakeWorld, []string, []int, fakeExc
	next      int
	released  []string
	calls     []string // "method" per call received, in order
	args      [][]any  // decoded arguments per call
	noJoin    bool     // String.join is refused (forces size/get)
	multi     bool     // methods want an agent index (multi-agent jar builds)
	bangless  bool     // answer without the leading "!" (old py4j)
	spam      int      // bytes of debug text written to stdout per step (subprocess mode)
	exitOnDie bool     // "die" exits the process (subprocess mode)
	goldRuns  int      // gold-path generations (load with gold, or reset after one)
	conns     []net.Conn
	// Odd worlds (off by default; subprocess mode reads them from
	// FAKE_SCIENCEWORLD_* variables, see TestMain):
	outside map[int]bool // variations that start outside ("This outside location is called the outside.")
	noRoom  map[int]bool // variations whose first look names no room
	dieStep int          // with dieOnce: the step call (1-based, this process's) on which the JVM dies
	dieOnce string       // a file created when one dies: only the first process to create it dies
	steps   int          // step calls received
}

type fakeExc struct{ trace string }

type fakeWorld struct {
	task       string
	variation  int
	simp       string
	gold       bool
	goldSticky bool   // a gold path was asked for once: reset() regenerates it
	k          int    // gold actions done
	room       string // "" (the start) or the room teleported to
	moves      int
	raw        float64
	completed  bool
}

// The scripted world: a gold path whose raw scores test Python-style rounding.
var (
	fakeGold   = []string{"open door to workshop", "go to workshop", "focus on red light bulb", "connect battery to red light bulb"}
	fakeScores = []float64{0.125, 0.375, 0.5, 1.0} // -> 12 (half to even), 38, 50, 100
	fakeLook   = "This room is called the hallway. In it, you see: \n\tthe agent\n\ta sign that reads C:\\temp\\new\r\nYou also see:\n\tA door to the workshop (that is closed)"
	fakeDesc   = "Your task is to turn on the red light bulb. First, focus on the red light bulb. Then, create an electrical circuit that powers it on."
	// the odd worlds' first looks and the workshop (teleport)
	fakeOutsideLook  = "This outside location is called the outside. Here you see: \n\tthe agent\n\ta substance called air\n\tan axe\nYou also see:\n\tA door to the workshop (that is open)"
	fakeNoRoomLook   = "You are floating somewhere. In it, you see: \n\tthe agent\nYou also see:\n\tA door to the workshop (that is open)"
	fakeWorkshopLook = "This room is called the workshop. In it, you see: \n\tthe agent\n\ta red light bulb\n\ta battery\nYou also see:\n\tA door to the hallway (that is open)"
)

// look is what "look around" shows in w: the room teleported to, else
// the variation's start.
func (g *fakeGateway) look(w *fakeWorld) string {
	switch {
	case w.room == "workshop":
		return fakeWorkshopLook
	case g.outside[w.variation]:
		return fakeOutsideLook
	case g.noRoom[w.variation]:
		return fakeNoRoomLook
	}
	return fakeLook
}

// dies reports whether this step call is the one the JVM dies on: the
// dieStep-th, in the first process to claim dieOnce.
func (g *fakeGateway) dies() bool {
	if g.dieOnce == "" || g.steps != g.dieStep {
		return false
	}
	f, err := os.OpenFile(g.dieOnce, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return false // another JVM died already
	}
	f.Close()
	return true
}

func newFakeGateway() (*fakeGateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &fakeGateway{ln: ln, objs: map[string]any{}}
	go g.accept()
	return g, nil
}

func (g *fakeGateway) addr() string { return g.ln.Addr().String() }

func (g *fakeGateway) close() {
	g.ln.Close()
	g.mu.Lock()
	for _, c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
}

func (g *fakeGateway) accept() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		g.conns = append(g.conns, c)
		g.mu.Unlock()
		go g.serve(c)
	}
}

func (g *fakeGateway) put(v any) string {
	id := "o" + strconv.Itoa(g.next)
	g.next++
	g.objs[id] = v
	return id
}

func fakeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\r", `\r`, "\n", `\n`).Replace(s)
}

func fakeUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			default:
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func fakeArg(line string) any {
	switch line[0] {
	case 's':
		return fakeUnescape(line[1:])
	case 'i', 'L':
		n, _ := strconv.Atoi(line[1:])
		return n
	case 'b':
		return line[1:] == "true"
	case 'd':
		f, _ := strconv.ParseFloat(line[1:], 64)
		return f
	case 'r':
		return fakeRef(line[1:])
	case 'n':
		return nil
	}
	return fmt.Sprintf("?%s", line)
}

type fakeRef string

func (g *fakeGateway) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		var lines []string
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			l = strings.TrimSuffix(l, "\n")
			if l == "e" {
				break
			}
			lines = append(lines, l)
		}
		ans, act := g.handle(lines)
		switch act {
		case "hang":
			time.Sleep(time.Hour)
			return
		case "die":
			if g.exitOnDie {
				os.Exit(3)
			}
			return
		}
		if g.bangless {
			ans = strings.TrimPrefix(ans, "!")
		}
		if _, err := c.Write([]byte(ans + "\n")); err != nil {
			return
		}
	}
}

func str(s string) string { return "!ys" + fakeEscape(s) }
func noMethod(m string) string {
	return "!xs" + fakeEscape("py4j.Py4JException: Method "+m+"([]) does not exist\n\tat py4j.reflection.ReflectionEngine.getMethod")
}

func (g *fakeGateway) handle(lines []string) (answer, action string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(lines) == 0 {
		return "!xsempty command", ""
	}
	switch lines[0] {
	case "i":
		if len(lines) < 2 || lines[1] != pythonInterface {
			return "!xsPy4JException: class not found", ""
		}
		return "!yr" + g.put(&fakeWorld{}), ""
	case "m":
		if len(lines) == 3 && lines[1] == "d" {
			delete(g.objs, lines[2])
			g.released = append(g.released, lines[2])
			return "!yv", ""
		}
		return "!xsbad memory command", ""
	case "p":
		if ex, ok := g.objs[strings.TrimPrefix(lines[1], "r")].(fakeExc); ok {
			return str(ex.trace), ""
		}
		return "!xsno such exception", ""
	case "c":
	default:
		return "!xsunknown command " + lines[0], ""
	}
	if len(lines) < 3 {
		return "!xsshort call", ""
	}
	target, method := lines[1], lines[2]
	var args []any
	for _, l := range lines[3:] {
		args = append(args, fakeArg(l))
	}
	g.calls = append(g.calls, method)
	g.args = append(g.args, args)
	if target == "z:java.lang.String" && method == "join" {
		if g.noJoin || len(args) != 2 {
			return noMethod("join"), ""
		}
		list, ok := g.objs[string(args[1].(fakeRef))].([]string)
		if !ok {
			return "!xsnot a list", ""
		}
		return str(strings.Join(list, args[0].(string))), ""
	}
	switch o := g.objs[target].(type) {
	case []string:
		switch method {
		case "size":
			return "!yi" + strconv.Itoa(len(o)), ""
		case "get":
			return str(o[args[0].(int)]), ""
		}
		return noMethod(method), ""
	case []int:
		switch method {
		case "size":
			return "!yi" + strconv.Itoa(len(o)), ""
		case "get":
			return "!yi" + strconv.Itoa(o[args[0].(int)]), ""
		}
		return noMethod(method), ""
	case *fakeWorld:
		return g.world(o, method, args)
	}
	return "!xsPy4JException: Target Object ID does not exist for this gateway :" + target, ""
}

func (g *fakeGateway) world(w *fakeWorld, method string, args []any) (string, string) {
	agent := 0
	if g.multi {
		agent = 1
	}
	switch method {
	case "load":
		want := 4
		if g.multi {
			want = 5
		}
		if len(args) != want {
			return noMethod("load"), ""
		}
		task := args[0].(string)
		if task != "power-component" {
			return str("ERROR: Task (" + task + "): unknown task in the fake"), ""
		}
		gold := args[len(args)-1].(bool)
		*w = fakeWorld{task: task, variation: args[1].(int), simp: args[2].(string), gold: gold, goldSticky: w.goldSticky || gold}
		if gold {
			g.goldRuns++
		}
		return str(""), ""
	case "reset":
		// Like PythonInterface.reset(): load() again with the sticky gold flag.
		*w = fakeWorld{task: w.task, variation: w.variation, simp: w.simp, gold: w.gold, goldSticky: w.goldSticky}
		if w.goldSticky {
			g.goldRuns++
		}
		return str(""), ""
	case "step":
		if len(args) != 1+agent {
			return noMethod("step"), ""
		}
		a := args[0].(string)
		g.steps++
		if g.dies() {
			return "", "die"
		}
		if g.spam > 0 {
			fmt.Fprintln(os.Stdout, strings.Repeat("Possible referents: agent, air, battery, wire\n", g.spam/46+1))
		}
		switch {
		case a == "die" || a == "hang":
			return "", a
		case a == "throw":
			id := g.put(fakeExc{trace: "java.lang.IllegalStateException: boom\n\tat scienceworld.Fake.step(Fake.scala:1)"})
			return "!xr" + id, ""
		case a == "look around":
			w.moves++
			return str(g.look(w)), ""
		case a == "teleport to workshop" && (strings.Contains(w.simp, "easy") || strings.Contains(w.simp, "teleportAction")):
			// the gold path's door and move are what reaching the
			// workshop is worth
			w.moves++
			w.room = "workshop"
			for w.k < 2 {
				w.raw = fakeScores[w.k]
				w.k++
			}
			return str("You teleport to the workshop."), ""
		case a == "inventory":
			w.moves++
			return str("In your inventory, you see:\n\tan orange"), ""
		case a == "task":
			w.moves++
			return str(fakeDesc), ""
		case a == "wait" || a == "wait1":
			w.moves++
			return str("You decide to wait for 1 iterations."), ""
		case a == "look at agent":
			w.moves++
			return str("You see yourself."), ""
		case a == "focus on agent":
			w.moves++
			w.raw = -1
			return str("You focus on the agent."), ""
		case w.k < len(fakeGold) && a == fakeGold[w.k]:
			w.moves++
			w.raw = fakeScores[w.k]
			w.k++
			w.completed = w.k == len(fakeGold)
			return str("You do it: " + a), ""
		}
		// As in the simulator, input it cannot parse costs no move.
		return str("No known action matches that input."), ""
	case "getScore":
		return "!yd" + strconv.FormatFloat(w.raw, 'g', -1, 64), ""
	case "getCompleted":
		return "!yb" + strconv.FormatBool(w.completed), ""
	case "getNumMoves":
		return "!yi" + strconv.Itoa(w.moves), ""
	case "getTaskDescription":
		return str(fakeDesc), ""
	case "freeActionLook":
		return str(g.look(w)), ""
	case "freeActionTaskDesc":
		if len(args) != 0 {
			return noMethod(method), ""
		}
		return str(fakeDesc), ""
	case "freeActionInventory":
		return str("In your inventory, you see:\n\tan orange"), ""
	case "getValidActionObjectCombinations":
		if len(args) != agent {
			return noMethod(method), ""
		}
		// A few of the simulator's neutral actions, one lethal focus and the
		// next gold action, in a fixed order of the fake's (a Jaccard tie
		// goes to the first).
		valid := []string{"look around", "inventory", "task", "wait", "wait1", "look at agent", "focus on agent"}
		if w.k < len(fakeGold) {
			valid = append(valid, fakeGold[w.k])
		}
		return "!yl" + g.put(valid), ""
	case "getGoldActionSequence":
		var gold []string
		if w.gold {
			gold = slices.Clone(fakeGold)
		}
		return "!yl" + g.put(gold), ""
	case "getTaskNames":
		var names []string
		for _, t := range taskTable {
			names = append(names, t.name)
		}
		return "!yl" + g.put(names), ""
	case "getTaskMaxVariations":
		if t, ok := lookupTask(args[0].(string)); ok {
			return "!yi" + strconv.Itoa(t.variations), ""
		}
		return "!yi0", ""
	case "getVariationsTrain":
		return "!yl" + g.put([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), ""
	case "getPossibleSimplifications":
		return str("noElectricalAction, openContainers, openDoors, selfWateringFlowerPots, teleportAction"), ""
	}
	return noMethod(method), ""
}

func (g *fakeGateway) callsOf(method string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.calls {
		if c == method {
			n++
		}
	}
	return n
}

func (g *fakeGateway) liveObjects() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.objs)
}
