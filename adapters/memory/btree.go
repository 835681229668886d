package memory

import (
	"cmp"
	"slices"
)

// defaultDegree is the minimum degree of the store's B-trees: every node but
// the root holds defaultDegree-1 to 2*defaultDegree-1 entries. 32 keeps a
// tree of a million entries four levels deep.
const defaultDegree = 32

// maxFreeNodes bounds the nodes a pool keeps for reuse: enough for the
// splits of the trees of a queue whose tasks move from state to state by
// batches (a batch of a thousand tasks fills about 32 nodes), few enough
// that a queue that shrank keeps little (about 100 KiB).
const maxFreeNodes = 48

// nodePool holds the nodes some trees merged away, for their next splits:
// the trees of one queue share one, so the nodes a batch frees in the tree
// of one state serve the tree of the next.
type nodePool struct{ free []*bnode }

// entry is an index entry: the key of a task in one index, as three words
// compared in order, and the task's handle. The words are compared as
// unsigned integers, so an index orders its tasks by mapping their key
// fields to words that order the same way (see the entry constructors in
// queue.go); the handle tells entries with equal words apart, ordered by the
// tree's tie function.
//
// One entry type for every index keeps the comparisons out of function
// values: they are inlined into the searches.
type entry struct {
	k0, k1, k2 uint64
	h          uint32
}

// btree is an ordered set of entries: a B-tree ordered by the words of its
// entries, then by tie for entries whose words are equal and whose handles
// differ. tie must be a strict total order on such handles (the order of the
// tasks' IDs); two entries with equal words and handles are the same entry.
// Insert, Delete, DeleteMin and Min cost O(log n); Ascend costs O(log n) to
// find its start and O(1) amortized per entry.
//
// An entry's key must not change while the entry is in the set. The set is
// not safe for concurrent use; the queue's lock guards it.
type btree struct {
	tie    func(a, b uint32) int
	degree int
	root   *bnode
	size   int
	pool   *nodePool
}

type bnode struct {
	items []entry
	kids  []*bnode // nil in a leaf; else len(items)+1 subtrees
}

// newBTree returns an empty set whose entries with equal words are ordered
// by tie (nil: by handle), with nodes of minimum degree degree (at least 2),
// that takes its new nodes from pool and leaves there the nodes it frees (nil:
// a pool of its own). Trees that share a pool have the same degree.
func newBTree(tie func(a, b uint32) int, degree int, pool *nodePool) btree {
	if tie == nil {
		tie = cmp.Compare[uint32]
	}
	if pool == nil {
		pool = &nodePool{}
	}
	return btree{tie: tie, degree: max(degree, 2), pool: pool}
}

// Len returns the number of entries.
func (t *btree) Len() int { return t.size }

func (t *btree) maxItems() int { return 2*t.degree - 1 }

// compare orders a and b.
func (t *btree) compare(a, b *entry) int {
	switch {
	case a.k0 != b.k0:
		return cmp.Compare(a.k0, b.k0)
	case a.k1 != b.k1:
		return cmp.Compare(a.k1, b.k1)
	case a.k2 != b.k2:
		return cmp.Compare(a.k2, b.k2)
	case a.h == b.h:
		return 0
	}
	return t.tie(a.h, b.h)
}

// find returns the index of the first entry of n not below x, and whether
// that entry is x. The comparison is compare's, written out: too large to be
// inlined, and this is the loop every operation of the store spends its
// time in. An entry past n's last one is found with one comparison: the
// indexes ordered by time or by Version take their new entries at the end.
func (t *btree) find(n *bnode, x *entry) (int, bool) {
	items := n.items
	lo, hi := 0, len(items)
	if hi > 0 {
		e := &items[hi-1]
		if e.k0 < x.k0 || e.k0 == x.k0 && (e.k1 < x.k1 || e.k1 == x.k1 && e.k2 < x.k2) {
			return hi, false
		}
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		e := &items[m]
		var below bool
		switch {
		case e.k0 != x.k0:
			below = e.k0 < x.k0
		case e.k1 != x.k1:
			below = e.k1 < x.k1
		case e.k2 != x.k2:
			below = e.k2 < x.k2
		default:
			below = e.h != x.h && t.tie(e.h, x.h) < 0
		}
		if below {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(items) && items[lo] == *x
}

// node returns an empty node, a leaf unless inner is set: one from the pool
// if it has one.
func (t *btree) node(inner bool) *bnode {
	var n *bnode
	if free := t.pool.free; len(free) > 0 {
		n = free[len(free)-1]
		free[len(free)-1] = nil
		t.pool.free = free[:len(free)-1]
	} else {
		n = &bnode{items: make([]entry, 0, t.maxItems())}
	}
	switch {
	case !inner:
		n.kids = nil
	case n.kids == nil:
		n.kids = make([]*bnode, 0, 2*t.degree)
	default:
		n.kids = n.kids[:0]
	}
	return n
}

// release leaves n, which the tree no longer uses, in the pool.
func (t *btree) release(n *bnode) {
	if len(t.pool.free) == maxFreeNodes || cap(n.items) < t.maxItems() {
		return
	}
	clear(n.kids[:cap(n.kids)]) // hold no subtree alive
	n.items, n.kids = n.items[:0], n.kids[:0]
	t.pool.free = append(t.pool.free, n)
}

// Insert adds x and reports whether it was absent; the same entry already in
// the set is left as it is.
func (t *btree) Insert(x entry) bool {
	if t.root == nil {
		t.root = &bnode{items: make([]entry, 0, 1)}
	}
	if len(t.root.items) == t.maxItems() {
		old := t.root
		t.root = t.node(true)
		t.root.kids = append(t.root.kids, old)
		t.split(t.root, 0)
	}
	n := t.root
	for {
		i, found := t.find(n, &x)
		if found {
			return false
		}
		if n.kids == nil {
			n.items = slices.Insert(n.items, i, x)
			t.size++
			return true
		}
		if len(n.kids[i].items) == t.maxItems() {
			t.split(n, i)
			switch c := t.compare(&x, &n.items[i]); {
			case c == 0:
				return false
			case c > 0:
				i++
			}
		}
		n = n.kids[i]
	}
}

// split divides the full child n.kids[i] around its median, which moves up
// into n.
func (t *btree) split(n *bnode, i int) {
	d := t.degree
	child := n.kids[i]
	median := child.items[d-1]
	right := t.node(child.kids != nil)
	right.items = append(right.items, child.items[d:]...)
	child.items = child.items[:d-1]
	if child.kids != nil {
		right.kids = append(right.kids, child.kids[d:]...)
		clear(child.kids[d:])
		child.kids = child.kids[:d]
	}
	n.items = slices.Insert(n.items, i, median)
	n.kids = slices.Insert(n.kids, i+1, right)
}

// Delete removes x and reports whether it was present.
func (t *btree) Delete(x entry) bool {
	if t.root == nil {
		return false
	}
	removed := t.remove(t.root, x)
	if removed {
		t.size--
	}
	t.shrink()
	return removed
}

// DeleteMin removes the smallest entry and returns it, and false when the
// set is empty. It goes down the leftmost path, comparing no entries.
func (t *btree) DeleteMin() (entry, bool) {
	if t.size == 0 {
		return entry{}, false
	}
	n := t.root
	for n.kids != nil {
		if len(n.kids[0].items) < t.degree {
			t.fill(n, 0) // the range of n.kids[0] stays n.kids[0]'s
		}
		n = n.kids[0]
	}
	x := n.items[0]
	n.items = slices.Delete(n.items, 0, 1)
	t.size--
	t.shrink()
	return x, true
}

// shrink drops a root emptied by a merge below it. An emptied root leaf
// stays, with its capacity: a set that keeps emptying and filling (the
// running tasks of a quiet queue) then does not allocate.
func (t *btree) shrink() {
	if len(t.root.items) == 0 && t.root.kids != nil {
		old := t.root
		t.root = old.kids[0]
		t.release(old)
	}
}

// remove deletes x from the subtree n, which holds at least degree entries
// unless it is the root. It goes down one path, topping up each child it
// enters to at least degree entries first, so a leaf never underflows.
func (t *btree) remove(n *bnode, x entry) bool {
	d := t.degree
	for {
		i, found := t.find(n, &x)
		if n.kids == nil {
			if !found {
				return false
			}
			n.items = slices.Delete(n.items, i, i+1)
			return true
		}
		if found {
			switch {
			case len(n.kids[i].items) >= d:
				// Replace x by its predecessor, then delete that from the left.
				pred := t.last(n.kids[i])
				n.items[i] = pred
				x, n = pred, n.kids[i]
			case len(n.kids[i+1].items) >= d:
				// Replace x by its successor, then delete that from the right.
				succ := t.first(n.kids[i+1])
				n.items[i] = succ
				x, n = succ, n.kids[i+1]
			default:
				// Both neighbours are minimal: merge them around x and go on
				// deleting x in the merged node.
				t.merge(n, i)
				n = n.kids[i]
			}
			continue
		}
		if len(n.kids[i].items) < d {
			i = t.fill(n, i)
		}
		n = n.kids[i]
	}
}

// fill brings n.kids[i] up to at least degree entries by taking an entry from
// a sibling that can spare one, or else by merging with a sibling. It returns
// the index of the child that now covers the range n.kids[i] covered.
func (t *btree) fill(n *bnode, i int) int {
	d := t.degree
	child := n.kids[i]
	switch {
	case i > 0 && len(n.kids[i-1].items) >= d:
		// Rotate right: the separator comes down, the left sibling's last
		// entry goes up.
		left := n.kids[i-1]
		child.items = slices.Insert(child.items, 0, n.items[i-1])
		n.items[i-1] = left.items[len(left.items)-1]
		left.items = left.items[:len(left.items)-1]
		if left.kids != nil {
			child.kids = slices.Insert(child.kids, 0, left.kids[len(left.kids)-1])
			left.kids[len(left.kids)-1] = nil
			left.kids = left.kids[:len(left.kids)-1]
		}
		return i
	case i < len(n.items) && len(n.kids[i+1].items) >= d:
		// Rotate left: the separator comes down, the right sibling's first
		// entry goes up.
		right := n.kids[i+1]
		child.items = append(child.items, n.items[i])
		n.items[i] = right.items[0]
		right.items = slices.Delete(right.items, 0, 1)
		if right.kids != nil {
			child.kids = append(child.kids, right.kids[0])
			right.kids = slices.Delete(right.kids, 0, 1)
		}
		return i
	case i < len(n.items):
		t.merge(n, i)
		return i
	default:
		t.merge(n, i-1)
		return i - 1
	}
}

// merge joins n.kids[i], the separator n.items[i] and n.kids[i+1] into
// n.kids[i].
func (t *btree) merge(n *bnode, i int) {
	left, right := n.kids[i], n.kids[i+1]
	left.items = append(left.items, n.items[i])
	left.items = append(left.items, right.items...)
	if left.kids != nil {
		left.kids = append(left.kids, right.kids...)
	}
	n.items = slices.Delete(n.items, i, i+1)
	n.kids = slices.Delete(n.kids, i+1, i+2)
	t.release(right)
}

func (t *btree) first(n *bnode) entry {
	for n.kids != nil {
		n = n.kids[0]
	}
	return n.items[0]
}

func (t *btree) last(n *bnode) entry {
	for n.kids != nil {
		n = n.kids[len(n.kids)-1]
	}
	return n.items[len(n.items)-1]
}

// Min returns the smallest entry, and false when the set is empty.
func (t *btree) Min() (entry, bool) {
	if t.size == 0 {
		return entry{}, false
	}
	return t.first(t.root), true
}

// Ascend calls fn for every entry in order until fn returns false.
func (t *btree) Ascend(fn func(entry) bool) {
	if t.root != nil {
		t.ascend(t.root, nil, fn)
	}
}

// AscendFrom calls fn for every entry not below pivot, in order, until fn
// returns false.
func (t *btree) AscendFrom(pivot entry, fn func(entry) bool) {
	if t.root != nil {
		t.ascend(t.root, &pivot, fn)
	}
}

// AscendWhere calls fn for every entry, in order, after those for which
// before holds (a prefix of the order), until fn returns false.
func (t *btree) AscendWhere(before func(entry) bool, fn func(entry) bool) {
	if t.root != nil {
		t.ascendBy(t.root, before, fn)
	}
}

// ascendBy walks the subtree n in order from the first entry before does not
// hold for (nil: from the start).
func (t *btree) ascendBy(n *bnode, before func(entry) bool, fn func(entry) bool) bool {
	i := 0
	if before != nil {
		i, _ = slices.BinarySearchFunc(n.items, struct{}{}, func(x entry, _ struct{}) int {
			if before(x) {
				return -1
			}
			return 1
		})
	}
	for ; i < len(n.items); i++ {
		if n.kids != nil && !t.ascendBy(n.kids[i], before, fn) {
			return false
		}
		before = nil
		if !fn(n.items[i]) {
			return false
		}
	}
	if n.kids != nil {
		return t.ascendBy(n.kids[len(n.items)], before, fn)
	}
	return true
}

// ascend walks the subtree n in order from pivot (nil: from the start). Only
// the first subtree it enters can hold entries below pivot.
func (t *btree) ascend(n *bnode, pivot *entry, fn func(entry) bool) bool {
	i := 0
	if pivot != nil {
		i, _ = t.find(n, pivot)
	}
	for ; i < len(n.items); i++ {
		if n.kids != nil && !t.ascend(n.kids[i], pivot, fn) {
			return false
		}
		pivot = nil
		if !fn(n.items[i]) {
			return false
		}
	}
	if n.kids != nil {
		return t.ascend(n.kids[len(n.items)], pivot, fn)
	}
	return true
}
