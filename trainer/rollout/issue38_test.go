package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// A simulator that dies mid-episode is logged with the episode's task and
// variation and the instance's replacement (issue 38 §6: it showed only as
// "error: 1" among the end reasons).
func TestDeadSimulatorLogged(t *testing.T) {
	var buf bytes.Buffer
	old := log.Logger
	log.Logger = zerolog.New(&buf)
	defer func() { log.Logger = old }()
	m := testutil.Model(t)
	dyingMade.Store(0)
	pool, err := environments.NewPool("textlab-dying", environments.Options{}, 2)
	require.NoError(t, err)
	defer pool.Close()
	r := testutil.Roller(t, m, 2, nil, func(_ *rollout.Config, o *rollout.Options) { o.Env, o.Pool = "textlab-dying", pool })
	eps, _, err := r.Run(context.Background(), testutil.Jobs(4, false))
	require.NoError(t, err)
	var dead *rollout.Episode
	for i := range eps {
		if eps[i].End == rollout.EndError {
			dead = &eps[i]
		}
	}
	require.NotNil(t, dead)
	out := buf.String()
	assert.Contains(t, out, "the environment died mid-episode")
	assert.Contains(t, out, fmt.Sprintf(`"task":"%s","variation":%d`, dead.Task, dead.Variation))
	assert.Contains(t, out, "replaced by a new one")
}
