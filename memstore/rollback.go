package memstore

import (
	"context"
	"database/sql"
	"fmt"
)

// DeleteAfterStep deletes every entry stamped with a training step greater
// than step, in every namespace, in one transaction, and returns how many
// were removed. A training run resuming from the checkpoint of step N calls
// it with N so that the memory matches the checkpoint: tips written by the
// steps after it (whose weights were lost) are forgotten. step < 0 deletes
// every entry with a non-negative step.
//
// Entries evicted by the per-namespace cap during those later steps are not
// brought back: the memory is then a subset of what it was at the
// checkpoint, never a superset (docs/train.md, "Resume").
func (s *Store) DeleteAfterStep(ctx context.Context, step int64) (int, error) {
	if s == nil {
		return 0, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	return s.mutate(ctx, "", func(tx *sql.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, "DELETE FROM entries WHERE step > ?", step)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// MaxStep returns the largest training step stamped on an entry (−1 when the
// store is empty).
func (s *Store) MaxStep(ctx context.Context) (int64, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	var v sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT MAX(step) FROM entries").Scan(&v); err != nil {
		return 0, classify(err)
	}
	if !v.Valid {
		return -1, nil
	}
	return v.Int64, nil
}
