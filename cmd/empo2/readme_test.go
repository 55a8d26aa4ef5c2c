package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExamples runs, in order and in one empty directory, every
// `empo2 …` line between the readme-examples markers of README.md, with the
// binary under test first on PATH. Lines marked "# needs …" depend on files
// this machine may lack and are skipped. The README's CLI tour thus cannot
// drift from the program.
func TestReadmeExamples(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "<!-- readme-examples:begin -->":
			in = true
		case l == "<!-- readme-examples:end -->":
			in = false
		case in && strings.HasPrefix(l, "empo2 ") && !strings.Contains(l, "# needs "):
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(lines) < 20 {
		t.Fatalf("found %d example lines in README.md; the markers or the examples are missing", len(lines))
	}
	dir := t.TempDir()
	// Fixture for `env play --actions actions.txt`.
	if err := os.WriteFile(filepath.Join(dir, "actions.txt"), []byte("look around\ninventory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Dir(binPath) + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, l := range lines {
		cmd := exec.Command("bash", "-c", l)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+path, "EMPO2_LOG_LEVEL=warn")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README example failed: %s\n%v\n%s", l, err, out)
		}
	}
}
