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
// command line between the readme-examples markers of README.md (blank
// lines, comments and code fences aside), with the binary under test first
// on PATH. Lines marked "# needs …" depend on files this machine may lack
// and are skipped. Lines that are not `empo2 …` commands (making an input
// file) run too, so the block is exactly what a reader types; the test
// adds no fixture. The README's CLI tour thus cannot drift from the program.
func TestReadmeExamples(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	commands := 0
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "<!-- readme-examples:begin -->":
			in = true
		case l == "<!-- readme-examples:end -->":
			in = false
		case !in || l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "```"):
		case strings.Contains(l, "# needs "):
		default:
			lines = append(lines, l)
			if strings.HasPrefix(l, "empo2 ") {
				commands++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if commands < 20 {
		t.Fatalf("found %d empo2 example lines in README.md; the markers or the examples are missing", commands)
	}
	dir := t.TempDir()
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
