package sft

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the configuration table of docs/sft.md")

// TestRunConfigDocsMatch: every key of `empo2 sft`'s configuration is
// documented by its doc tag, and docs/sft.md's table is RunConfigReference
// verbatim.
func TestRunConfigDocsMatch(t *testing.T) {
	assert.Empty(t, runSchema.Undocumented(), "keys without a doc tag")
	require.NoError(t, runSchema.DocTable(filepath.Join("..", "..", "docs", "sft.md"), "sft-config-reference", *updateDoc))
}

// Validate names the key and the value of every setting it refuses, and
// the defaults (alpha 2·rank, max_len the model's) stay unset until Run.
func TestRunConfigValidate(t *testing.T) {
	base := []string{"model=m.gguf", "data=d.jsonl", "out=a.gguf"}
	c, err := LoadRunConfig("", base)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	assert.Nil(t, c.MaxLen)
	assert.Equal(t, 32.0, c.LoRA.alpha())
	assert.Equal(t, "a.state.gguf", c.checkpointPath())
	for _, tc := range []struct {
		set, want string
	}{
		{"min_lr=0.01", "min lr (min_lr) 0.01: want a rate in [0, lr = 0.001]"},
		{"max_len=-5", "max length (max_len) -5"},
		{"micro_tokens=-1", "micro_tokens -1"},
		{"lr=1e30", "learning rate (lr) 1e+30: want a rate in (0, 1]"},
		{"lr=.nan", "lr = .nan is not a finite number"},
		{"lora.rank=0", "lora.rank 0"},
		{"lora.alpha=.inf", "lora.alpha = .inf"},
		{"lora.targets=[]", "lora.targets []"},
		{"warmup=-1", "warmup -1"},
		{"save_every=-1", "save_every -1"},
		{"full=true", ""}, // valid alone
	} {
		c, err := LoadRunConfig("", append(append([]string(nil), base...), tc.set))
		if err == nil { // a number that is not finite is refused when decoded
			err = c.Validate()
		}
		if tc.want == "" {
			require.NoError(t, err, tc.set)
			continue
		}
		require.ErrorIs(t, err, ErrRunConfig, tc.set)
		assert.Contains(t, err.Error(), tc.want, tc.set)
	}
	c, err = LoadRunConfig("", append(base, "full=true", "lora.rank=4"))
	require.NoError(t, err)
	assert.ErrorContains(t, c.Validate(), "lora.rank does not apply to full")
}
