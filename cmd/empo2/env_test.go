package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var finalScore = regexp.MustCompile(`final score: (-?[0-9.]+) after ([0-9]+) actions \(done: (true|false)\)`)

func TestEnvListTextlab(t *testing.T) {
	out, stderr, err := runCLI(t, "env", "list")
	if err != nil {
		t.Fatalf("env list: %v\n%s", err, stderr)
	}
	for _, want := range []string{"textlab", "find-living-thing", "light-bulb", "use-thermometer", "scienceworld", "power-component", "mendelian-genetics-unknown-plant", "HELD OUT"} {
		if !strings.Contains(out, want) {
			t.Errorf("env list lacks %q:\n%s", want, out)
		}
	}
	out, stderr, err = runCLI(t, "env", "list", "textlab", "--json")
	if err != nil {
		t.Fatalf("env list textlab --json: %v\n%s", err, stderr)
	}
	var envs []struct {
		Name  string
		Tasks []struct {
			Name       string
			Variations int
			Train      []int
			Dev        []int
			Test       []int
			HeldOut    bool `json:"held_out"`
			StepLimit  int  `json:"step_limit"`
		}
	}
	if err := json.Unmarshal([]byte(out), &envs); err != nil {
		t.Fatalf("env list --json is not JSON: %v\n%s", err, out)
	}
	if len(envs) != 1 || envs[0].Name != "textlab" || len(envs[0].Tasks) < 4 {
		t.Fatalf("env list textlab --json: %+v", envs)
	}
	held := 0
	for _, tk := range envs[0].Tasks {
		if len(tk.Train)+len(tk.Dev)+len(tk.Test) != tk.Variations || tk.StepLimit <= 0 {
			t.Errorf("task %s: splits %d+%d+%d of %d, limit %d", tk.Name, len(tk.Train), len(tk.Dev), len(tk.Test), tk.Variations, tk.StepLimit)
		}
		if tk.HeldOut {
			held++
		}
	}
	if held == 0 {
		t.Error("no held-out task listed")
	}
	if _, stderr, err := runCLI(t, "env", "list", "nope"); err == nil || !strings.Contains(stderr, "unknown environment") {
		t.Fatalf("env list nope: err %v, stderr %s", err, stderr)
	}
}

func TestEnvGoldTextlab(t *testing.T) {
	for _, tc := range [][]string{
		{"find-living-thing", "--variation", "0"},
		{"light-bulb", "--variation", "17"},
		{"melt", "--goal", "3"}, // --goal is an alias
		{"use-thermometer", "--variation=100"},
		{"boil"},
		{"freeze", "-q", "--variation", "24"},
	} {
		args := append([]string{"env", "gold", "textlab"}, tc...)
		out, stderr, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
		m := finalScore.FindStringSubmatch(out)
		if m == nil || m[1] != "100" || m[3] != "true" {
			t.Fatalf("%v does not end at 100:\n%s", args, out)
		}
	}
}

func TestEnvPlayReplay(t *testing.T) {
	dir := t.TempDir()
	out, stderr, err := runCLI(t, "env", "gold", "textlab", "light-bulb", "--variation", "5", "--quiet")
	if err != nil {
		t.Fatalf("gold: %v\n%s", err, stderr)
	}
	var actions []string
	for _, l := range strings.Split(out, "\n") {
		if a, ok := strings.CutPrefix(l, "> "); ok {
			actions = append(actions, a)
		}
	}
	if len(actions) < 5 {
		t.Fatalf("too few gold actions:\n%s", out)
	}
	file := filepath.Join(dir, "actions.txt")
	content := "# a replay\n\n" + strings.Join(actions, "\n") + "\n"
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err = runCLI(t, "env", "play", "textlab", "light-bulb", "--variation", "5", "--actions", file)
	if err != nil {
		t.Fatalf("play --actions: %v\n%s", err, stderr)
	}
	if m := finalScore.FindStringSubmatch(out); m == nil || m[1] != "100" || m[2] != strconv.Itoa(len(actions)) || m[3] != "true" {
		t.Fatalf("replay does not reach 100:\n%s", out)
	}
	if !strings.Contains(out, "This room is called the hallway.") || !strings.Contains(out, "Task: Your task is to turn on the") {
		t.Fatalf("play does not show the task and the first observation:\n%s", out)
	}

	// Reading stdin: a wrong focus ends the episode at -100; "valid" and "score" are commands.
	cmd := exec.Command(binPath, "env", "play", "textlab", "melt")
	cmd.Stdin = strings.NewReader("valid\nopen door to kitchen\nscore\nfocus on picture\nlook around\n")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("play from stdin: %v\n%s", err, se.String())
	}
	o := so.String()
	if !strings.Contains(o, "open door to kitchen\n") || !strings.Contains(o, "score: 0") || !strings.Contains(o, "The door is now open.") {
		t.Fatalf("play from stdin output:\n%s", o)
	}
	if m := finalScore.FindStringSubmatch(o); m == nil || m[1] != "-100" || m[2] != "2" || m[3] != "true" {
		t.Fatalf("wrong focus should end at -100 after 2 actions:\n%s", o)
	}
	// "quit" ends the session without ending the episode; nothing after it is played.
	cmd = exec.Command(binPath, "env", "play", "textlab", "melt")
	cmd.Stdin = strings.NewReader("look around\nquit\nopen door to kitchen\n")
	so.Reset()
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("play then quit: %v\n%s", err, se.String())
	}
	if m := finalScore.FindStringSubmatch(so.String()); m == nil || m[2] != "1" || m[3] != "false" || strings.Contains(so.String(), "The door is now open.") {
		t.Fatalf("quit should stop after 1 action, episode not done:\n%s", so.String())
	}
	// Stdin that is a character device but not a terminal (/dev/null) gets
	// no prompt.
	cmd = exec.Command(binPath, "env", "play", "textlab", "melt") // Stdin nil: /dev/null
	so.Reset()
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("play from /dev/null: %v\n%s", err, se.String())
	}
	if strings.Contains(so.String(), "(type an action") || strings.Contains(so.String(), "> ") {
		t.Fatalf("play prompts on a stdin that is not a terminal:\n%s", so.String())
	}
	if _, _, err := runCLI(t, "env", "play", "textlab", "melt", "--actions", filepath.Join(dir, "missing.txt")); err == nil {
		t.Fatal("a missing --actions file was accepted")
	}
}

// Flags may follow the positional arguments (urfave/cli v2 alone stops at
// the first one): permuteArgs in app.go moves them, and "--" ends them.
func TestEnvFlagsAfterArgs(t *testing.T) {
	gold := func(args ...string) string {
		t.Helper()
		out, stderr, err := runCLI(t, append([]string{"env", "gold", "textlab"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
		return out
	}
	// The same variation through every spelling, before and after the task.
	want := gold("--variation", "11", "-q", "light-bulb")
	for _, args := range [][]string{
		{"light-bulb", "--variation", "11", "-q"},
		{"light-bulb", "--variation=11", "--quiet"},
		{"light-bulb", "--goal", "11", "-q=true"},
		{"-q", "light-bulb", "--variation", "11"},
		{"--variation", "3", "light-bulb", "-q", "--variation", "11"}, // the last one wins
		{"-q", "--variation", "11", "--", "light-bulb"},
	} {
		if got := gold(args...); got != want {
			t.Errorf("%v printed\n%s\nwant\n%s", args, got, want)
		}
	}
	if !strings.Contains(want, "light-bulb variation 11") || strings.Contains(want, "[reward") {
		t.Fatalf("--variation 11 -q not applied:\n%s", want)
	}
	if out := gold("light-bulb", "--variation", "11", "-q=false"); !strings.Contains(out, "[reward") {
		t.Fatalf("-q=false after the task should print every step:\n%s", out)
	}
	// -h / --help after the arguments prints the help and plays nothing.
	for _, h := range []string{"--help", "-h"} {
		out := gold("light-bulb", h)
		if !strings.Contains(out, "USAGE:") || !strings.Contains(out, "--variation") || strings.Contains(out, "final score:") || strings.Contains(out, "This room") {
			t.Fatalf("env gold textlab light-bulb %s:\n%s", h, out)
		}
	}
}

func TestEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"env", "gold", "nosuchenv"}, "unknown environment"},
		{[]string{"env", "gold", "textlab", "nosuchtask"}, "unknown task"},
		{[]string{"env", "gold", "textlab"}, "task name is required"},
		{[]string{"env", "gold", "textlab", "melt", "--variation", "9999"}, "out of range"},
		{[]string{"env", "gold", "textlab", "melt", "--bogus"}, "not defined"},
		{[]string{"env", "play", "textlab", "melt", "--simplifications", "flying"}, "simplification"},
		{[]string{"env", "gold"}, "want ENV"},
		{[]string{"env", "gold", "textlab", "melt", "--variation"}, "needs an argument"},
		{[]string{"env", "gold", "textlab", "melt", "--variation", "two"}, "invalid value"},
		{[]string{"env", "gold", "textlab", "melt", "extra"}, "want ENV [TASK], got 3"},
		{[]string{"env", "gold", "textlab", "--", "melt", "--variation", "1"}, "want ENV [TASK], got 4"},
		{[]string{"env", "list", "textlab", "webshop"}, "at most one ENV"},
		{[]string{"env", "gold", "textlab", "melt", "--env-opt", "xmx"}, "want KEY=VALUE"},
		// A JVM that cannot start is an error, never a hang.
		{[]string{"env", "gold", "scienceworld", "3-1", "--scienceworld-jar", "/dev/null/none.jar"}, "simulator jar not found"},
		{[]string{"env", "gold", "scienceworld", "3-1", "--scienceworld-jar", binPath, "--env-opt", "java=/nonexistent/java"}, "/nonexistent/java"},
		{[]string{"env", "play", "scienceworld", "boil", "--scienceworld-jar", ""}, "SCIENCEWORLD_JAR"},
	} {
		cmd := exec.Command(binPath, tc.args...)
		cmd.Env = append(os.Environ(), "SCIENCEWORLD_JAR=")
		var se bytes.Buffer
		cmd.Stderr = &se
		err := cmd.Run()
		if err == nil {
			t.Errorf("%v succeeded", tc.args)
			continue
		}
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
			t.Errorf("%v: %v", tc.args, err)
		}
		if !strings.Contains(se.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, se.String(), tc.want)
		}
	}
}

// TestEnvScienceWorldFakeJVM drives `env gold` and `env play` for
// scienceworld end to end, with the scienceworld package's test binary as
// the "java" launcher: it checks the JVM command line, prints a port, serves
// a fake py4j gateway with a scripted power-component world and floods its
// stdout on every step (see environments/scienceworld). The real jar is
// covered by that package's TestRealSimulator when SCIENCEWORLD_JAR is set.
func TestEnvScienceWorldFakeJVM(t *testing.T) {
	dir := t.TempDir()
	fakeJava := filepath.Join(dir, "fake-java")
	build := exec.Command("go", "test", "-c", "-o", fakeJava, "../../environments/scienceworld")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the fake java: %v\n%s", err, out)
	}
	jar := filepath.Join(dir, "scienceworld.jar")
	if err := os.WriteFile(jar, []byte("not really a jar"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(binPath, args...)
		cmd.Env = append(os.Environ(), "FAKE_SCIENCEWORLD_JVM=gateway", "SCIENCEWORLD_JAR="+jar)
		cmd.Stdin = strings.NewReader(stdin)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s\n%s", args, err, so.String(), se.String())
		}
		return so.String()
	}
	// The task by id, the jar from $SCIENCEWORLD_JAR, the launcher by --env-opt.
	out := run("", "env", "gold", "scienceworld", "3-1", "--env-opt", "java="+fakeJava, "--env-opt", "xmx=256m")
	m := finalScore.FindStringSubmatch(out)
	if m == nil || m[1] != "100" || m[2] != "4" || m[3] != "true" {
		t.Fatalf("env gold scienceworld 3-1:\n%s", out)
	}
	if !strings.Contains(out, "power-component variation 0: 4 gold actions") || !strings.Contains(out, "step 4/30") {
		t.Fatalf("env gold scienceworld output:\n%s", out)
	}
	// Play from stdin: an unknown action, then the gold path.
	out = run("dance\nopen door to workshop\ngo to workshop\nscore\nfocus on red light bulb\nconnect battery to red light bulb\n",
		"env", "play", "scienceworld", "power-component", "--env-opt", "java="+fakeJava, "--variation", "3")
	if m := finalScore.FindStringSubmatch(out); m == nil || m[1] != "100" || m[2] != "5" || m[3] != "true" {
		t.Fatalf("env play scienceworld:\n%s", out)
	}
	if !strings.Contains(out, "No known action matches that input.") || !strings.Contains(out, "score: 38") || !strings.Contains(out, "Your task is to turn on the red light bulb") {
		t.Fatalf("env play scienceworld output:\n%s", out)
	}
}
