package llama

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// freedPoison makes glibc fill every freed block with a byte pattern and
// keeps small blocks out of its thread caches (which skip the fill), so a
// read of freed C memory sees 0xa5a5… instead of the old value.
const freedPoison = "glibc.malloc.tcache_count=0:glibc.malloc.perturb=165"

// TestContextCloseFreesSchedulerBeforeBackends: llama_context declares its
// scheduler before its backends, so C++ frees the backends first and the
// pinned module's ggml_backend_sched_free then reads each backend's
// iface.reset from freed memory (the flaky SIGSEGV in
// ggml_backend_sched_free seen in CI, stop 50). Close must keep the backends
// alive until the scheduler is gone. A child process with freed memory
// poisoned creates, uses and closes contexts (the rollout kind and the
// embedding kind): with the read of freed memory it calls 0xa5a5… and dies.
func TestContextCloseFreesSchedulerBeforeBackends(t *testing.T) {
	if os.Getenv("EMPO2_FREE_ORDER_CHILD") == "1" {
		m := loadTiny(t)
		before := deferredBackendFrees()
		ps := []ContextParams{{NCtx: 64, Threads: 1}, {NCtx: 64, NSeqMax: 2, Threads: 2}, {NCtx: 32, NBatch: 32, Embeddings: true, KVUnified: true, Threads: 1}}
		for _, p := range ps {
			c, err := NewContext(m, p)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Embeddings {
				if _, err := c.Generate(t.Context(), mustTokenize(t, m, "hello world"), SampleParams{MaxTokens: 3, Seed: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		// each context has at least the CPU backend, whose free must have
		// waited for the scheduler
		if n := deferredBackendFrees() - before; n < len(ps) {
			t.Fatalf("%d backend frees waited for their scheduler over %d contexts (want ≥ %d)", n, len(ps), len(ps))
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestContextCloseFreesSchedulerBeforeBackends$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "EMPO2_FREE_ORDER_CHILD=1", "GLIBC_TUNABLES="+freedPoison)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("a context closed with freed memory poisoned: %v\n%s", err, tail(string(out), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
