package marchbench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestMatmulRuns(t *testing.T) {
	g, err := MatmulGFLOPS(64, 1, 2)
	if err != nil || !(g > 0) {
		t.Fatalf("MatmulGFLOPS = %v, %v", g, err)
	}
	if _, err := MatmulGFLOPS(0, 1, 1); err == nil {
		t.Fatal("n=0 accepted")
	}
}

// BenchmarkMatmulMarch compares, in one run, a 1024² F32 ggml matmul (1
// thread) compiled with this build's flags against the same code compiled by
// cgo's defaults (-O3 without -march), which it builds in a temporary dir.
// The first run compiles ggml a second time (about 2 minutes on 2 cores).
func BenchmarkMatmulMarch(b *testing.B) {
	native, err := MatmulGFLOPS(1024, 1, 5)
	if err != nil {
		b.Fatal(err)
	}
	exe := filepath.Join(b.TempDir(), "matmul-portable")
	build := exec.Command("go", "build", "-o", exe, "./cmd/matmul")
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CGO_CFLAGS=") && !strings.HasPrefix(kv, "CGO_CXXFLAGS=") {
			env = append(env, kv)
		}
	}
	build.Env = append(env, "CGO_CFLAGS=-O3", "CGO_CXXFLAGS=-O3")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the portable matmul: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		b.Fatal(err)
	}
	portable, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(native, "GFLOP/s-this-build")
	b.ReportMetric(portable, "GFLOP/s-no-march")
	b.ReportMetric(native/portable, "speedup")
	b.Logf("CGO_CFLAGS=%q: %.1f GFLOP/s; without -march: %.1f GFLOP/s (%.1fx)", os.Getenv("CGO_CFLAGS"), native, portable, native/portable)
}
