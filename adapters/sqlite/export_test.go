package sqlite

import "time"

// Migrations are the schema migrations, for tests that build a database of
// an older version.
var Migrations = migrations

// ApplicationID marks a leasehold database (PRAGMA application_id).
const ApplicationID = applicationID

// SetSharedFor sets how long after another connection's commit the store
// writes the sequence row at each commit that draws (lazyAfter); 0: never,
// the store always owns the rows it draws from. Set it before the store's
// first operation.
func (s *Store) SetSharedFor(d time.Duration) { s.lazyAfter = d }

// SetAfterDamagedItem makes f run when an AckBatch is about to run again
// without an item whose damaged record it met; the returned func undoes it.
func SetAfterDamagedItem(f func()) func() {
	afterDamagedItem = f
	return func() { afterDamagedItem = nil }
}
