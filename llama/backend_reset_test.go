package llama

import "testing"

// A backend created on a device of a loaded backend library has no reset
// (the scheduler's free would call it through a backend llama_context has
// already freed), the device keeps working through its original
// init_backend, wrapping twice wraps once, and the backend is still freed
// by its own free.
func TestBackendResetWrapped(t *testing.T) {
	gone, n1, n2, resets, frees, freesNow, freesDeferred := fakeResetCheck()
	if !gone {
		t.Fatal("the backend created on a wrapped device still has a reset")
	}
	if n1 < 1 || n2 != n1 {
		t.Fatalf("wrapped devices after the first and second wrap: %d, %d (want the same, ≥ 1)", n1, n2)
	}
	if resets != 0 || frees != 2 {
		t.Fatalf("stand-in backends: %d resets, %d frees (want 0 and 2)", resets, frees)
	}
	if freesNow != 1 || freesDeferred != 1 {
		t.Fatalf("frees after a free outside a context's free: %d (want 1, at once); inside one, before it ends: %d (want 1: deferred)", freesNow, freesDeferred)
	}
}
