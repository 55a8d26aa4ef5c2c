package memstore

import (
	"context"
	"path/filepath"
	"testing"
)

// TestDeleteAfterStep: entries of later steps disappear from the file and
// from retrieval; earlier ones stay; the index matches a fresh open.
func TestDeleteAfterStep(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	emb := vecEmb{id: "vec", dim: 4}
	s := openT(t, path, emb)
	for step := int64(0); step < 5; step++ {
		for _, ns := range []string{"a/0", "b/1"} {
			e := Entry{Content: ns + " tip " + string(rune('0'+step)), Score: float64(step), Step: step, Embedding: at(1)}
			if _, err := s.Add(ctx, ns, []Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if m, err := s.MaxStep(ctx); err != nil || m != 4 {
		t.Fatalf("MaxStep = %d, %v; want 4", m, err)
	}
	n, err := s.DeleteAfterStep(ctx, 2)
	if err != nil || n != 4 {
		t.Fatalf("DeleteAfterStep = %d, %v; want 4 removed", n, err)
	}
	check := func(s *Store) {
		t.Helper()
		for _, ns := range []string{"a/0", "b/1"} {
			r, err := s.Retrieve(ctx, ns, at(1), Query{K: 10, Threshold: -1})
			if err != nil {
				t.Fatal(err)
			}
			if r.Count != 3 {
				t.Fatalf("%s: %d entries after rollback, want 3", ns, r.Count)
			}
			for _, m := range r.Entries {
				if m.Step > 2 {
					t.Fatalf("%s: entry of step %d survived", ns, m.Step)
				}
			}
		}
		if m, err := s.MaxStep(ctx); err != nil || m != 2 {
			t.Fatalf("MaxStep = %d, %v; want 2", m, err)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openT(t, path, emb))
}
