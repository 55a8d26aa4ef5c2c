package llama

import "testing"

func TestXCtx(t *testing.T) {
	m := loadTiny(t)
	for _, emb := range []bool{false, true} {
		for _, p := range []ContextParams{{NSeqMax: 3, NBatch: 64, NCtx: 64}, {NSeqMax: 3, NBatch: 64, NCtx: 64, KVUnified: true}, {NSeqMax: 5, NBatch: 7}, {NSeqMax: 4, NBatch: 64}} {
			p.Embeddings = emb
			t.Logf("%+v", p)
			c, err := NewContext(m, p)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	}
}
