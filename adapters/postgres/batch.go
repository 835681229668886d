package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

// EnqueueBatch implements core.BatchStore: the tasks are added in one
// transaction, in order, each with the checks of Enqueue (an ID already
// taken, also by an earlier item, is ErrConflict; a full queue
// ErrQueueFull), and each is answered on its own. A refused item writes
// nothing. A batch without unique keys on a store without a capacity is
// added by one statement for all its items (about 3× the tasks a second of
// a statement per item, in batches of 100); otherwise each item runs
// Enqueue's statement. An error that is not an item's own (a damaged row, the
// transport) fails the whole batch, which then changes nothing.
func (s *Store) EnqueueBatch(ctx context.Context, p core.EnqueueBatchParams) (core.BatchResult, error) {
	items := make([]core.ItemResult, len(p.Tasks))
	write := s.write
	var pipe pipeFunc
	if s.capacity == 0 && !slices.ContainsFunc(p.Tasks, func(a model.EnqueueArgs) bool { return a.UniqueKey != "" }) {
		// Nothing to decide in the client: what the statement refuses it
		// writes nothing for, as a lone Enqueue's.
		write, pipe = func(ctx context.Context, queue string, flags lockFlags, validate func() error, fn func(o *opTx) error) (time.Time, error) {
			return s.writeFinal(ctx, queue, flags, validate, fn, pipe)
		}, s.pipedEnqueueBatch(p.Tasks, items)
	}
	now, err := write(ctx, p.Queue, lockNotify, func() error { return model.CheckBatchSize(len(p.Tasks)) }, func(o *opTx) error {
		clear(items) // fn runs again when the transaction it shared failed
		if slices.ContainsFunc(p.Tasks, func(a model.EnqueueArgs) bool { return a.UniqueKey != "" }) {
			// An item with a unique key is checked against the key's
			// holder, as the items before it left it: item by item.
			for i, a := range p.Tasks {
				if err := validEnqueue(a); err != nil {
					items[i].Err = err
					continue
				}
				task, err := o.enqueue(a)
				if err != nil && !isItemError(err) {
					return err
				}
				items[i] = core.ItemResult{Task: task, Err: err}
			}
			return nil
		}
		if s.capacity == 0 {
			return o.enqueueMany(p.Tasks, items)
		}
		// Every item's statement and a read of its ID go to the server in
		// one round trip; they run in order, so each read sees the queue
		// as the items before it left it.
		b := &pgx.Batch{}
		for i, a := range p.Tasks {
			if err := validEnqueue(a); err != nil {
				items[i].Err = err
				continue
			}
			task := o.newTask(a)
			items[i].Task = task
			b.Queue(s.q.enqueue, o.enqueueArgs(task)...)
			b.Queue(s.q.probe, o.queue, []byte(a.ID))
		}
		res := o.tx.SendBatch(o.ctx, b)
		defer res.Close()
		for i := range p.Tasks {
			if items[i].Err != nil {
				continue
			}
			var v int64
			err := res.QueryRow().Scan(&v)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			inserted := err == nil
			_, _, _, found, perr := probeRow(res.QueryRow(), o.queue, p.Tasks[i].ID)
			if inserted {
				items[i].Task.Version = uint64(v)
				continue
			}
			items[i] = core.ItemResult{Err: o.enqueueRefusal(p.Tasks[i].ID, found, perr)}
			if !isItemError(items[i].Err) {
				return items[i].Err
			}
		}
		return res.Close()
	})
	if err != nil {
		return core.BatchResult{}, err
	}
	return core.BatchResult{Now: now, Items: items}, nil
}

// pipedEnqueueBatch is the EnqueueBatch of tasks without a unique key, on
// a store without a capacity, sent with the lock: enqueueMany with its
// time from txNow, which also reads the IDs it did not add
// (enqueueManyProbedNow). The function it returns answers items.
func (s *Store) pipedEnqueueBatch(tasks []model.EnqueueArgs, items []core.ItemResult) pipeFunc {
	return func(o *opTx, b *pgx.Batch) func(pgx.BatchResults) error {
		clear(items) // the call may be sent again when its transaction failed
		// Every task Ready: the statement makes it Scheduled when it
		// runs after now.
		cols := newEnqueueColumns(tasks, items, func(model.EnqueueArgs) model.State { return model.Ready })
		if len(cols.ids) == 0 {
			return func(pgx.BatchResults) error { return nil }
		}
		b.Queue(s.q.enqueueManyProbedNow, cols.args(o.queue, int64(0))...)
		return func(res pgx.BatchResults) error {
			rows, err := res.Query()
			if err != nil {
				return err
			}
			type probed struct {
				found bool
				err   error
			}
			added := make(map[string]uint64, len(cols.ids))
			seen := map[string]probed{}
			for rows.Next() {
				var probe bool
				var id []byte
				var version, token int64
				var state int16
				if err := rows.Scan(&probe, &id, &version, &state, &token); err != nil {
					rows.Close()
					return err
				}
				if !probe {
					added[string(id)] = uint64(version)
					continue
				}
				var p probed
				_, _, _, p.found, p.err = probeRow(fixedRow{state, token, version}, o.queue, string(id))
				seen[string(id)] = p
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			// An ID's first valid item is the one added; every other item
			// of it finds it taken, by this batch or before it.
			for i, a := range tasks {
				if items[i].Err != nil {
					continue
				}
				if v, ok := added[a.ID]; ok {
					task := o.newTask(a)
					task.Version = v
					items[i].Task = task
					delete(added, a.ID)
					seen[a.ID] = probed{found: true}
					continue
				}
				p := seen[a.ID]
				items[i].Err = o.enqueueRefusal(a.ID, p.found, p.err)
				if !isItemError(items[i].Err) {
					return items[i].Err
				}
			}
			return nil
		}
	}
}

// enqueueColumns are the arrays of enqueueMany's statement, one entry per
// valid task.
type enqueueColumns struct {
	ids, payloads         [][]byte
	priorities            []int32
	states                []int16
	maxAttempts, timeouts []int64
	runAfter              []*int64
}

// newEnqueueColumns returns the columns of the valid tasks of tasks, each
// in state(a), and answers every other item with its error.
func newEnqueueColumns(tasks []model.EnqueueArgs, items []core.ItemResult, state func(model.EnqueueArgs) model.State) enqueueColumns {
	n := len(tasks)
	c := enqueueColumns{
		ids: make([][]byte, 0, n), payloads: make([][]byte, 0, n), priorities: make([]int32, 0, n),
		states: make([]int16, 0, n), maxAttempts: make([]int64, 0, n), timeouts: make([]int64, 0, n),
		runAfter: make([]*int64, 0, n),
	}
	for i, a := range tasks {
		if err := validEnqueue(a); err != nil {
			items[i].Err = err
			continue
		}
		c.ids = append(c.ids, []byte(a.ID))
		c.payloads = append(c.payloads, clone(a.Payload))
		c.priorities = append(c.priorities, int32(a.Priority))
		c.states = append(c.states, int16(state(a)))
		c.maxAttempts = append(c.maxAttempts, int64(a.MaxAttempts))
		c.runAfter = append(c.runAfter, micros(model.Round(a.RunAfter)))
		c.timeouts = append(c.timeouts, int64(a.Timeout))
	}
	return c
}

// args are the statement's parameters, now last.
func (c enqueueColumns) args(queue string, now any) []any {
	return []any{queue, c.ids, c.payloads, c.priorities, c.states, c.maxAttempts, c.runAfter, c.timeouts, now}
}

// enqueueMany adds the valid items of a batch without unique keys on a
// store without a capacity by one statement (queries.enqueueMany), which
// answers as the items' statements run in order would: an item is added
// unless its ID is taken, by a row of the queue (a damaged one included)
// or by an earlier item. The IDs of the items it did not add are then
// read, in one round trip, to say why (as Enqueue's probe does).
func (o *opTx) enqueueMany(tasks []model.EnqueueArgs, items []core.ItemResult) error {
	cols := newEnqueueColumns(tasks, items, func(a model.EnqueueArgs) model.State {
		return queuedState(o.now, model.Round(a.RunAfter))
	})
	if len(cols.ids) == 0 {
		return nil
	}
	for i, a := range tasks {
		if items[i].Err == nil {
			items[i].Task = o.newTask(a)
		}
	}
	ids := cols.ids
	rows, err := o.tx.Query(o.ctx, o.s.q.enqueueMany, cols.args(o.queue, micros(o.now))...)
	if err != nil {
		return err
	}
	added := make(map[string]uint64, len(ids))
	for rows.Next() {
		var id []byte
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			rows.Close()
			return err
		}
		added[string(id)] = uint64(v)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// An ID's first valid item is the one added; every other item of it,
	// and every item of an ID not added, is answered from a read of its ID.
	b := &pgx.Batch{}
	var refused []int
	for i := range tasks {
		if items[i].Err != nil {
			continue
		}
		if v, ok := added[tasks[i].ID]; ok {
			items[i].Task.Version = v
			delete(added, tasks[i].ID)
			continue
		}
		refused = append(refused, i)
		b.Queue(o.s.q.probe, o.queue, []byte(tasks[i].ID))
	}
	if len(refused) == 0 {
		return nil
	}
	res := o.tx.SendBatch(o.ctx, b)
	defer res.Close()
	for _, i := range refused {
		_, _, _, found, perr := probeRow(res.QueryRow(), o.queue, tasks[i].ID)
		items[i] = core.ItemResult{Err: o.enqueueRefusal(tasks[i].ID, found, perr)}
		if !isItemError(items[i].Err) {
			return items[i].Err
		}
	}
	return res.Close()
}

// AckBatch implements core.BatchStore: the claims are acknowledged in one
// transaction, in order, each with the guard of Ack and, when it does not
// hold, the diagnosis of Ack; each is answered on its own. Claims of
// distinct tasks are applied by one statement; a batch that names a task
// twice runs the statement of Ack once per claim. With a pop (p.Pop.N not
// 0), the same transaction then claims the next Ready tasks with Pop's
// statement, after the acks. An item that names a damaged record is
// answered ErrCorrupt, whatever its token, and leaves the record as it is
// (when its statement matched the record, the transaction is undone and the
// batch runs again without that item, whose record that transaction reads
// again: ErrStaleClaim if it was set aside meanwhile); the other items are
// decided as if it were not there. An error that is not an item's own (the transport, a
// damaged sequence) fails the whole batch, which then changes nothing.
func (s *Store) AckBatch(ctx context.Context, p core.AckBatchParams) (core.BatchResult, error) {
	validate := func() error {
		if err := model.CheckBatchSize(len(p.Acks)); err != nil {
			return err
		}
		for i, a := range p.Acks {
			if err := model.ValidateAckBatchItem(p.Queue, i, a.Claim); err != nil {
				return err
			}
		}
		return model.ValidateAckPop(p.Pop.Lease, p.Pop.N)
	}
	items := make([]core.ItemResult, len(p.Acks))
	var claimed []model.Task
	// The items' damaged records met so far: their items are answered
	// ErrCorrupt, and the acks run without them (live).
	damaged := map[string]error{}
	// live returns the items to run and the index of each in p.Acks; idx
	// is nil when they are all of them.
	live := func() (idx []int, acks []core.AckItem) {
		if len(damaged) == 0 {
			return nil, p.Acks
		}
		idx = make([]int, 0, len(p.Acks)) // not nil, even when every item is damaged
		for i, a := range p.Acks {
			if damaged[a.Claim.TaskID] == nil {
				idx, acks = append(idx, i), append(acks, a)
			}
		}
		return idx, acks
	}
	// An item whose record an earlier attempt found damaged is answered as
	// of the transaction that commits: the record may have been set aside
	// since (a scan that committed in between), and a claim on a record
	// set aside is ErrStaleClaim. now holds those answers, read in that
	// transaction (readDamaged).
	now := map[string]error{}
	damagedIDs := func() (ids []string) {
		for _, a := range p.Acks {
			if id := a.Claim.TaskID; damaged[id] != nil && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	// claimOf is the last claim of the batch on the task id.
	claimOf := func(id string) model.Claim {
		for _, a := range slices.Backward(p.Acks) {
			if a.Claim.TaskID == id {
				return a.Claim
			}
		}
		return model.Claim{}
	}
	readDamaged := func(ids []string, read func(id string) (pgx.Rows, error)) error {
		clear(now)
		for _, id := range ids {
			ts, err := scanTasks(read(id))
			var d *damagedError
			switch {
			case errors.As(err, &d):
				now[id] = decided(d)
			case err != nil:
				return err
			default:
				state, token, found := model.Quarantined, uint64(0), len(ts) == 1
				if found {
					state, token = ts[0].State, ts[0].ClaimToken
				}
				now[id] = claimRefusal(model.OpAck, claimOf(id), state, token, found, nil)
			}
		}
		return nil
	}
	// fill answers the items from sub, the answers of the items live
	// returned (items itself when idx is nil), and the others as damaged.
	fill := func(idx []int, sub []core.ItemResult) {
		if idx == nil {
			return
		}
		clear(items)
		for i, a := range p.Acks {
			items[i].Err = cmp.Or(now[a.Claim.TaskID], damaged[a.Claim.TaskID])
		}
		for k, i := range idx {
			items[i] = sub[k]
		}
	}
	// ackErr is the error of the acks: an item's damaged record, which the
	// statement matched and changed, undoes the transaction and runs the
	// batch again without it; any other refuses the batch.
	ackErr := func(err error) error {
		var d *damagedError
		if errors.As(err, &d) && slices.ContainsFunc(p.Acks, func(a core.AckItem) bool { return a.Claim.TaskID == d.id }) {
			return &damagedItem{d}
		}
		return decided(err) // an ack does not set a record aside
	}
	var pipe pipeFunc
	if distinctTasks(p.Acks) && (p.Pop.N == 0 || s.popMode == PopUpdateReturning) {
		pipe = func(o *opTx, b *pgx.Batch) func(pgx.BatchResults) error {
			clear(items)
			claimed = nil
			idx, acks := live()
			sub := items
			if idx != nil {
				sub = make([]core.ItemResult, len(acks))
			}
			readAcks := o.ackManyPiped(acks, sub, b)
			ids := damagedIDs()
			for _, id := range ids {
				b.Queue(o.s.q.get, o.queue, []byte(id))
			}
			read := func(res pgx.BatchResults) error {
				if err := readAcks(res); err != nil {
					return ackErr(err)
				}
				if err := readDamaged(ids, func(string) (pgx.Rows, error) { return res.Query() }); err != nil {
					return err
				}
				fill(idx, sub)
				return nil
			}
			if p.Pop.N == 0 {
				return read
			}
			readPop := o.popPiped(p.Pop.Lease, p.Pop.N, b, &claimed)
			return func(res pgx.BatchResults) error {
				if err := read(res); err != nil {
					return err
				}
				return readPop(res)
			}
		}
	}
	step := func(o *opTx) error {
		clear(items) // step runs again when the transaction it shared failed
		claimed = nil
		idx, acks := live()
		sub := items
		if idx != nil {
			sub = make([]core.ItemResult, len(acks))
		}
		var err error
		if distinctTasks(acks) {
			err = o.ackMany(acks, sub)
		} else {
			err = o.ackEach(acks, sub)
		}
		if err != nil {
			return ackErr(err)
		}
		err = readDamaged(damagedIDs(), func(id string) (pgx.Rows, error) { return o.tx.Query(o.ctx, o.s.q.get, o.queue, []byte(id)) })
		if err != nil {
			return err
		}
		fill(idx, sub)
		// The items are judged before the pop (as the model does): an
		// item its guard refused on a record this operation's own pop set
		// aside met that record still damaged.
		for i, a := range p.Acks {
			if guardRefusal(items[i].Err) && slices.Contains(o.setAside, a.Claim.TaskID) {
				items[i].Err = corrupt("task %q in queue %q: damaged (set aside by this AckBatch's pop)", a.Claim.TaskID, p.Queue)
			}
		}
		if p.Pop.N == 0 {
			return nil
		}
		claimed, err = o.pop(p.Pop.Lease, p.Pop.N)
		return err
	}
	for {
		now, err := s.scanWrite(ctx, p.Queue, 0, validate, step, pipe)
		var di *damagedItem
		if errors.As(err, &di) && damaged[di.d.id] == nil {
			damaged[di.d.id] = decided(di.d)
			if afterDamagedItem != nil {
				afterDamagedItem()
			}
			continue
		}
		if err != nil {
			return core.BatchResult{}, err
		}
		if afterAckBatch != nil {
			afterAckBatch()
		}
		return core.BatchResult{Now: now, Items: items, Claimed: claimed}, nil
	}
}

// afterDamagedItem, when set (by tests), runs when an AckBatch is about to
// run again without an item whose damaged record it met.
var afterDamagedItem func()

// afterAckBatch, when set (by tests), runs once an AckBatch's transaction
// has committed, before the AckBatch answers.
var afterAckBatch func()

// damagedItem is what AckBatch's step returns when an item's statement met
// its damaged record: the transaction is undone and the batch runs again
// with that item answered ErrCorrupt. It is not a *damagedError, which
// scanWrite would set aside.
type damagedItem struct{ d *damagedError }

func (e *damagedItem) Error() string { return e.d.Error() }

func (e *damagedItem) Unwrap() error { return core.ErrCorrupt }

// ackEach acknowledges the claims one statement each, in order: as in
// EnqueueBatch, every item's statement and a read of its task in one round
// trip.
func (o *opTx) ackEach(acks []core.AckItem, items []core.ItemResult) error {
	b := &pgx.Batch{}
	for i, a := range acks {
		if err := validClaim(a.Claim); err != nil {
			items[i].Err = err
			continue
		}
		b.Queue(o.s.q.ack, o.queue, []byte(a.Claim.TaskID), int64(a.Claim.Token), micros(o.now), clone(a.Result))
		b.Queue(o.s.q.probe, o.queue, []byte(a.Claim.TaskID))
		b.Queue(o.s.q.get, o.queue, []byte(a.Claim.TaskID))
	}
	res := o.tx.SendBatch(o.ctx, b)
	defer res.Close()
	for i, a := range acks {
		if items[i].Err != nil {
			continue
		}
		ts, err := scanTasks(res.Query())
		if err != nil {
			return err
		}
		state, token, _, found, perr := probeRow(res.QueryRow(), o.queue, a.Claim.TaskID)
		damage, gerr := damageOf(res.Query())
		if gerr != nil {
			return gerr
		}
		if len(ts) == 1 {
			items[i].Task = ts[0]
			continue
		}
		err = damageFirst(claimRefusal(model.OpAck, a.Claim, state, token, found, perr), damage)
		if !isItemError(err) {
			return err
		}
		items[i].Err = err
	}
	return res.Close()
}

// ackArgs returns the arrays of the statement of ackMany for the claims of
// acks that are valid, and answers the others' items with their error.
func ackArgs(acks []core.AckItem, items []core.ItemResult) (ids [][]byte, tokens []int64, results [][]byte) {
	ids = make([][]byte, 0, len(acks))
	tokens = make([]int64, 0, len(acks))
	results = make([][]byte, 0, len(acks))
	for i, a := range acks {
		if err := validClaim(a.Claim); err != nil {
			items[i].Err = err
			continue
		}
		ids = append(ids, []byte(a.Claim.TaskID))
		tokens = append(tokens, int64(a.Claim.Token))
		results = append(results, clone(a.Result))
	}
	return ids, tokens, results
}

// ackManyPiped is ackMany sent with the lock, as the one statement that
// also reads the task of every claim it did not apply, which says why
// (ackManyProbedNow).
func (o *opTx) ackManyPiped(acks []core.AckItem, items []core.ItemResult, b *pgx.Batch) func(pgx.BatchResults) error {
	ids, tokens, results := ackArgs(acks, items)
	stmt := o.s.q.ackManyProbedNow
	if o.final {
		stmt = o.s.q.ackManyProbedFinal
	}
	b.Queue(stmt, o.queue, ids, tokens, results, int64(0))
	return func(res pgx.BatchResults) error {
		rows, err := res.Query()
		if err != nil {
			return err
		}
		type probed struct {
			state          model.State
			token, version uint64
			err            error
			damage         error // the record's damage (decided), or nil
		}
		// The item of each claim by its task's ID (the claims name
		// distinct tasks), into which its acknowledged task is read.
		item := make(map[string]int, len(acks))
		for i, a := range acks {
			if items[i].Err == nil {
				item[a.Claim.TaskID] = i
			}
		}
		acked := make([]bool, len(acks))
		var seen map[string]probed
		var probe bool
		sc := newRowScanner(&probe)
		for rows.Next() {
			if err := sc.scan(rows); err != nil {
				rows.Close()
				return err
			}
			r := &sc.r
			if !probe {
				t, err := r.decode()
				if err != nil {
					rows.Close()
					return err
				}
				i, ok := item[t.ID]
				if !ok {
					rows.Close()
					return fmt.Errorf("leasehold/postgres: AckBatch acknowledged task %q, which it did not name", t.ID)
				}
				items[i].Task, acked[i] = t, true
				continue
			}
			var p probed
			p.state, p.token, p.version, _, p.err = probeRow(fixedRow{r.state, r.token, r.version}, o.queue, string(r.id))
			p.damage = r.damage()
			if seen == nil {
				seen = map[string]probed{}
			}
			seen[string(r.id)] = p
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i, a := range acks {
			if items[i].Err != nil {
				continue
			}
			if acked[i] {
				continue
			}
			p, found := seen[a.Claim.TaskID]
			err := damageFirst(claimRefusal(model.OpAck, a.Claim, p.state, p.token, found, p.err), p.damage)
			if !isItemError(err) {
				return err
			}
			items[i].Err = err
		}
		return nil
	}
}

// fixedRow is a pgx.Row of values already read.
type fixedRow struct {
	state          int16
	token, version int64
}

func (r fixedRow) Scan(dest ...any) error {
	*dest[0].(*int16), *dest[1].(*int64), *dest[2].(*int64) = r.state, r.token, r.version
	return nil
}

// distinctTasks reports whether no two claims of acks name the same task.
func distinctTasks(acks []core.AckItem) bool {
	seen := make(map[string]struct{}, len(acks))
	for _, a := range acks {
		if _, dup := seen[a.Claim.TaskID]; dup {
			return false
		}
		seen[a.Claim.TaskID] = struct{}{}
	}
	return true
}

// ackMany acknowledges claims of distinct tasks with one statement, which
// stamps the claims that hold their task in the order of the batch, as one
// Ack after the other would. Each claim it did not apply changed nothing
// (no other item touched its task), so reading those tasks afterwards, in
// one round trip, says why in the model's order.
func (o *opTx) ackMany(acks []core.AckItem, items []core.ItemResult) error {
	ids, tokens, results := ackArgs(acks, items)
	tasks, err := scanTasks(o.tx.Query(o.ctx, o.s.q.ackMany, o.queue, ids, tokens, results, micros(o.now)))
	if err != nil {
		return err
	}
	acked := make(map[string]model.Task, len(tasks))
	for _, t := range tasks {
		acked[t.ID] = t
	}
	b := &pgx.Batch{}
	var missed []int
	for i, a := range acks {
		if items[i].Err != nil {
			continue
		}
		if t, ok := acked[a.Claim.TaskID]; ok {
			items[i].Task = t
			continue
		}
		missed = append(missed, i)
		b.Queue(o.s.q.probe, o.queue, []byte(a.Claim.TaskID))
		b.Queue(o.s.q.get, o.queue, []byte(a.Claim.TaskID))
	}
	if len(missed) == 0 {
		return nil
	}
	res := o.tx.SendBatch(o.ctx, b)
	defer res.Close()
	for _, i := range missed {
		c := acks[i].Claim
		state, token, _, found, perr := probeRow(res.QueryRow(), o.queue, c.TaskID)
		damage, gerr := damageOf(res.Query())
		if gerr != nil {
			return gerr
		}
		err := damageFirst(claimRefusal(model.OpAck, c, state, token, found, perr), damage)
		if !isItemError(err) {
			return err
		}
		items[i].Err = err
	}
	return res.Close()
}

// isItemError reports whether err is one of the model's refusals, which
// refuse one item of a batch and change nothing.
func isItemError(err error) bool { return model.Kind(err) != nil }

// damageOf reads the rows of a get statement (one task's record, or none)
// and returns the record's damage as a decision reports it (ErrCorrupt), or
// nil for a sound record or none; err is any other failure.
func damageOf(rows pgx.Rows, qerr error) (damage, err error) {
	_, err = scanTasks(rows, qerr)
	var d *damagedError
	if errors.As(err, &d) {
		return decided(d), nil
	}
	return nil, err
}

// damage is the damage of the record r holds, read by a probe (whose state
// is negated for a cancelled task, see probedState), as a decision reports
// it, or nil.
func (r *rawTask) damage() error {
	c := *r
	if c.state == -int16(model.Failed) {
		c.state = int16(model.Failed)
	}
	_, err := c.decode() // nil, or a *damagedError
	return decided(err)
}

// damageFirst is err, an item's refusal, unless its guard refused it
// (guardRefusal) on a damaged record: then the damage, which the model
// reports first, whatever the claim's token. The record is read in the
// transaction that decides the batch, so that every item of the batch is
// answered as of one instant.
func damageFirst(err, damage error) error {
	if damage != nil && guardRefusal(err) {
		return damage
	}
	return err
}
