package trainer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	_ "github.com/empo2/empo2/environments/textlab"
)

// TestConcurrentEnvPoolDistinct: every instance of the training pool is its
// own. newEnvPool starts its first instance alone and hands it to
// NewPoolFunc's constructor, which runs in n goroutines at once; a plain
// "handed" flag there was a data race that, rarely, let two calls both
// take the first instance: two episodes of one batch then played on one
// textlab instance and the run failed with environments.ErrEpisodeDone
// (once in a 25-run study). The race detector (make test-race) reported
// that flag on every run of this test; NewPoolFunc now also refuses a
// repeated instance.
func TestConcurrentEnvPoolDistinct(t *testing.T) {
	ctx := context.Background()
	const n = 16
	for it := range 50 {
		pool, err := newEnvPool("textlab", environments.Options{}, n)
		require.NoError(t, err)
		seen := map[environments.Env]bool{}
		for range n {
			e, err := pool.Acquire(ctx)
			require.NoError(t, err)
			require.Falsef(t, seen[e], "pool %d: one instance handed out twice", it)
			seen[e] = true
		}
		require.NoError(t, pool.Close())
	}
}
