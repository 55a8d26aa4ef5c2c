package headless

import "os"

// RequireEnv, when set (CI: .ci/run), makes a test that finds no Chromium
// fail instead of skipping.
const RequireEnv = "EMPO2_REQUIRE_CHROMIUM"

// TB is the part of testing.TB that ForTest uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// ForTest returns Chromium's path for a browser test; without one it skips
// the test saying how to get it, or fails it where RequireEnv is set.
func ForTest(t TB) string {
	t.Helper()
	p, err := Find()
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%v (%s is set: this machine must run the browser tests)", err, RequireEnv)
		}
		t.Skipf("%v; skipped (CI installs it and sets %s)", err, RequireEnv)
	}
	return p
}
