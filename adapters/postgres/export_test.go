package postgres

// Migrations are the schema migrations, for tests that build a schema of an
// older version; "{s}" stands for the quoted schema name.
var Migrations = migrations

// Groups returns the number of queues the store keeps a group of waiting
// writes for.
func (s *Store) Groups() int {
	n := 0
	s.groups.Range(func(any, any) bool { n++; return true })
	return n
}

// SetAfterDamagedItem makes f run when an AckBatch is about to run again
// without an item whose damaged record it met; the returned func undoes it.
func SetAfterDamagedItem(f func()) func() {
	afterDamagedItem = f
	return func() { afterDamagedItem = nil }
}

// SetAfterAckBatch makes f run once an AckBatch's transaction has
// committed, before the AckBatch answers; the returned func undoes it.
func SetAfterAckBatch(f func()) func() {
	afterAckBatch = f
	return func() { afterAckBatch = nil }
}

// KnowsQueueRow reports whether the store's transactions on queue count on
// its row (opTx.lock).
func KnowsQueueRow(s *Store, queue string) bool { return s.rows.has(queue) }
