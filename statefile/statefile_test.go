package statefile

import "testing"

func TestIsMoment(t *testing.T) {
	for name, want := range map[string]bool{
		"blk.0.attn_q.weight.lora_a":        false,
		"blk.0.attn_q.weight.lora_a.adam_m": true,
		"blk.0.attn_q.weight.lora_b.adam_v": true,
		"output_norm.weight":                false,
		"output_norm.weight.adam_v":         true,
	} {
		if got := IsMoment(name); got != want {
			t.Errorf("IsMoment(%q) = %v, want %v", name, got, want)
		}
	}
}
