package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// requireEnvCommand skips while the generic `empo2 env` command is absent
// from this build (it lives in env.go, another file of this package).
func requireEnvCommand(t *testing.T) {
	t.Helper()
	if _, _, err := runCLI(t, "env", "list"); err != nil {
		if out, _, _ := runCLI(t, "--help"); !strings.Contains(out, "\n   env") {
			t.Skip("the env command is not built into empo2 yet")
		}
	}
}

func TestEnvListShowsWebshop(t *testing.T) {
	requireEnvCommand(t)
	out, stderr, err := runCLI(t, "env", "list")
	if err != nil {
		t.Fatalf("env list: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "webshop") {
		t.Fatalf("env list does not show webshop:\n%s", out)
	}
}

// rewardOne matches the closing line of a purchase with reward 1 (score 100
// on the 0–100 scale).
var rewardOne = regexp.MustCompile(`(?m)^final score: 100 after \d+ actions \(done: true\)$`)

func TestEnvGoldWebshop(t *testing.T) {
	requireEnvCommand(t)
	for _, goal := range []string{"0", "7", "499"} {
		out, stderr, err := runCLI(t, "env", "gold", "webshop", "--goal", goal)
		if err != nil {
			t.Fatalf("env gold webshop --goal %s: %v\n%s\n%s", goal, err, out, stderr)
		}
		if !strings.Contains(strings.ToLower(out), "click[buy now]") || !rewardOne.MatchString(out) {
			t.Fatalf("env gold webshop --goal %s does not buy with reward 1:\n%s", goal, out)
		}
	}
	if _, _, err := runCLI(t, "env", "gold", "webshop", "--goal", "999999"); err == nil {
		t.Fatal("an out-of-range goal was accepted")
	}
}

// TestEnvGoldWebshopData runs the gold path on a hand-made shop given with
// --data, and checks the errors for a malformed products file and for a
// directory with the attributes file only (as ../shared/webshop).
func TestEnvGoldWebshopData(t *testing.T) {
	requireEnvCommand(t)
	dir := t.TempDir()
	products := `[{"asin": "B000000001", "name": "Acme Red Lipstick", "full_description": "A long lasting lipstick.",
 "small_description": ["Long lasting color"], "pricing": "$12.50",
 "customization_options": {"Color": [{"value": "Ruby/Red"}, {"value": "Nude"}]},
 "product_category": "Beauty › Makeup › Lips", "query": "lipstick", "category": "beauty"},
 {"asin": "B000000002", "name": "Acme Blue Shampoo", "full_description": "Sulfate free shampoo.",
 "small_description": "Gentle", "pricing": "$5.00", "customization_options": null,
 "product_category": "Beauty › Hair Care", "query": "shampoo", "category": "beauty"}]`
	attrs := `{"B000000001": {"attributes": ["long lasting"], "instruction": "Find me long lasting lipstick", "instruction_attributes": ["long lasting"]}}`
	os.WriteFile(filepath.Join(dir, "items_shuffle_t.json"), []byte(products), 0o644)
	os.WriteFile(filepath.Join(dir, "items_ins_v2_t.json"), []byte(attrs), 0o644)
	out, stderr, err := runCLI(t, "env", "gold", "webshop", "--goal", "1", "--data", dir)
	if err != nil {
		t.Fatalf("env gold --data: %v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "click[b000000001]") || !rewardOne.MatchString(out) {
		t.Fatalf("env gold --data output:\n%s", out)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "items_shuffle_t.json"), []byte(`[{"asin": `), 0o644)
	if _, stderr, err := runCLI(t, "env", "gold", "webshop", "--data", bad); err == nil || !strings.Contains(stderr, "malformed") ||
		!strings.Contains(stderr, "items_shuffle_t.json") {
		t.Fatalf("malformed data: err %v, stderr %s", err, stderr)
	}
	attrsOnly := t.TempDir()
	os.WriteFile(filepath.Join(attrsOnly, "items_ins_v2_1000.json"), []byte(attrs), 0o644)
	if _, stderr, err := runCLI(t, "env", "gold", "webshop", "--data", attrsOnly); err == nil || !strings.Contains(stderr, "no items_shuffle*.json in") {
		t.Fatalf("attributes file only: err %v, stderr %s", err, stderr)
	}
}

// TestEnvPlayWebshop replays the gold actions through `env play --actions`.
func TestEnvPlayWebshop(t *testing.T) {
	requireEnvCommand(t)
	out, stderr, err := runCLI(t, "env", "gold", "webshop", "--goal", "3", "--quiet")
	if err != nil {
		t.Fatalf("env gold: %v\n%s", err, stderr)
	}
	var acts []string
	for _, line := range strings.Split(out, "\n") {
		if a, ok := strings.CutPrefix(line, "> "); ok {
			acts = append(acts, a)
		}
	}
	if len(acts) < 3 || !strings.HasPrefix(acts[0], "search[") {
		t.Fatalf("gold actions %v from:\n%s", acts, out)
	}
	file := filepath.Join(t.TempDir(), "actions.txt")
	// An invalid action first: it changes nothing and costs a step.
	os.WriteFile(file, []byte("click[nothing here]\n"+strings.Join(acts, "\n")+"\n"), 0o644)
	out, stderr, err = runCLI(t, "env", "play", "webshop", "--goal", "3", "--actions", file)
	if err != nil {
		t.Fatalf("env play: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "WebShop [SEP] Instruction: [SEP] ") || !strings.Contains(out, "Page 1 (Total results: ") ||
		!regexp.MustCompile(`(?m)^final score: 100 after \d+ actions \(done: true\)$`).MatchString(out) {
		t.Fatalf("env play output:\n%s", out)
	}
}

// TestEnvPlayWebshopStdin plays from stdin as a user would: a search, an
// invalid click (same observation, reward 0), the page's valid actions.
func TestEnvPlayWebshopStdin(t *testing.T) {
	requireEnvCommand(t)
	cmd := exec.Command(binPath, "env", "play", "webshop", "--goal", "3")
	cmd.Stdin = strings.NewReader("search[lipstick]\nclick[not there]\nvalid\nquit\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("env play: %v\n%s", err, errb.String())
	}
	var obs []string
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "> ") && i+1 < len(lines) {
			obs = append(obs, lines[i+1])
		}
	}
	if len(obs) != 2 || !regexp.MustCompile(`Page 1 \(Total results: \d+\) \[SEP\] Next > \[SEP\] `).MatchString(obs[0]) || obs[1] != obs[0] {
		t.Fatalf("observations %q from:\n%s", obs, out.String())
	}
	if !strings.Contains(out.String(), "click[back to search]\nclick[next >]\nclick[b0") ||
		!regexp.MustCompile(`(?m)^final score: 0 after 2 actions \(done: false\)$`).MatchString(out.String()) {
		t.Fatalf("env play output:\n%s", out.String())
	}
}
