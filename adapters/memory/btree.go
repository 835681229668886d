package memory

import "slices"

// defaultDegree is the minimum degree of the store's B-trees: every node but
// the root holds defaultDegree-1 to 2*defaultDegree-1 items. 32 keeps a node's
// items within a few cache lines and a tree of a million items four levels
// deep.
const defaultDegree = 32

// btree is an ordered set: a B-tree of items of type T ordered by cmp, which
// must be a strict total order on the items the set holds (cmp(a, b) == 0
// means a and b are the same item). Insert, Delete and Min cost O(log n);
// Ascend costs O(log n) to find its start and O(1) amortized per item.
//
// An item's key must not change while the item is in the set. The set is not
// safe for concurrent use; the queue's lock guards it.
type btree[T any] struct {
	cmp    func(a, b T) int
	degree int
	root   *bnode[T]
	size   int
}

type bnode[T any] struct {
	items []T
	kids  []*bnode[T] // nil in a leaf; else len(items)+1 subtrees
}

// newBTree returns an empty set ordered by cmp, with nodes of minimum degree
// degree (at least 2).
func newBTree[T any](cmp func(a, b T) int, degree int) *btree[T] {
	return &btree[T]{cmp: cmp, degree: max(degree, 2)}
}

// Len returns the number of items.
func (t *btree[T]) Len() int { return t.size }

func (t *btree[T]) maxItems() int { return 2*t.degree - 1 }

// find returns the index of the first item of n not below x, and whether that
// item equals x.
func (t *btree[T]) find(n *bnode[T], x T) (int, bool) {
	lo, hi := 0, len(n.items)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.cmp(n.items[m], x) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.items) && t.cmp(n.items[lo], x) == 0
}

// Insert adds x and reports whether it was absent; an equal item already in
// the set is left as it is.
func (t *btree[T]) Insert(x T) bool {
	if t.root == nil {
		t.root = &bnode[T]{items: make([]T, 0, 1)}
	}
	if len(t.root.items) == t.maxItems() {
		old := t.root
		t.root = &bnode[T]{items: make([]T, 0, t.maxItems()), kids: []*bnode[T]{old}}
		t.split(t.root, 0)
	}
	n := t.root
	for {
		i, found := t.find(n, x)
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
			switch c := t.cmp(x, n.items[i]); {
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
func (t *btree[T]) split(n *bnode[T], i int) {
	d := t.degree
	child := n.kids[i]
	median := child.items[d-1]
	right := &bnode[T]{items: make([]T, d-1, t.maxItems())}
	copy(right.items, child.items[d:])
	clear(child.items[d-1:])
	child.items = child.items[:d-1]
	if child.kids != nil {
		right.kids = make([]*bnode[T], d, 2*d)
		copy(right.kids, child.kids[d:])
		clear(child.kids[d:])
		child.kids = child.kids[:d]
	}
	n.items = slices.Insert(n.items, i, median)
	n.kids = slices.Insert(n.kids, i+1, right)
}

// Delete removes x and reports whether it was present.
func (t *btree[T]) Delete(x T) bool {
	if t.root == nil {
		return false
	}
	removed := t.remove(t.root, x)
	if removed {
		t.size--
	}
	// An emptied root leaf stays, with its capacity: a set that keeps
	// emptying and filling (the running tasks of a quiet queue) then does not
	// allocate.
	if len(t.root.items) == 0 && t.root.kids != nil {
		t.root = t.root.kids[0]
	}
	return removed
}

// remove deletes x from the subtree n, which holds at least degree items
// unless it is the root. It goes down one path, topping up each child it
// enters to at least degree items first, so a leaf never underflows.
func (t *btree[T]) remove(n *bnode[T], x T) bool {
	d := t.degree
	for {
		i, found := t.find(n, x)
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

// fill brings n.kids[i] up to at least degree items by taking an item from a
// sibling that can spare one, or else by merging with a sibling. It returns
// the index of the child that now covers the range n.kids[i] covered.
func (t *btree[T]) fill(n *bnode[T], i int) int {
	d := t.degree
	child := n.kids[i]
	switch {
	case i > 0 && len(n.kids[i-1].items) >= d:
		// Rotate right: the separator comes down, the left sibling's last
		// item goes up.
		left := n.kids[i-1]
		child.items = slices.Insert(child.items, 0, n.items[i-1])
		n.items[i-1] = left.items[len(left.items)-1]
		var zero T
		left.items[len(left.items)-1] = zero
		left.items = left.items[:len(left.items)-1]
		if left.kids != nil {
			child.kids = slices.Insert(child.kids, 0, left.kids[len(left.kids)-1])
			left.kids[len(left.kids)-1] = nil
			left.kids = left.kids[:len(left.kids)-1]
		}
		return i
	case i < len(n.items) && len(n.kids[i+1].items) >= d:
		// Rotate left: the separator comes down, the right sibling's first
		// item goes up.
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
func (t *btree[T]) merge(n *bnode[T], i int) {
	left, right := n.kids[i], n.kids[i+1]
	left.items = append(left.items, n.items[i])
	left.items = append(left.items, right.items...)
	if left.kids != nil {
		left.kids = append(left.kids, right.kids...)
	}
	n.items = slices.Delete(n.items, i, i+1)
	n.kids = slices.Delete(n.kids, i+1, i+2)
}

func (t *btree[T]) first(n *bnode[T]) T {
	for n.kids != nil {
		n = n.kids[0]
	}
	return n.items[0]
}

func (t *btree[T]) last(n *bnode[T]) T {
	for n.kids != nil {
		n = n.kids[len(n.kids)-1]
	}
	return n.items[len(n.items)-1]
}

// Min returns the smallest item, and false when the set is empty.
func (t *btree[T]) Min() (T, bool) {
	if t.size == 0 {
		var zero T
		return zero, false
	}
	return t.first(t.root), true
}

// Ascend calls fn for every item in order until fn returns false.
func (t *btree[T]) Ascend(fn func(T) bool) {
	if t.root != nil {
		t.ascend(t.root, nil, fn)
	}
}

// AscendFrom calls fn for every item not below pivot, in order, until fn
// returns false.
func (t *btree[T]) AscendFrom(pivot T, fn func(T) bool) {
	if t.root != nil {
		t.ascend(t.root, &pivot, fn)
	}
}

// AscendWhere calls fn for every item, in order, after those for which
// before holds (a prefix of the order), until fn returns false.
func (t *btree[T]) AscendWhere(before func(T) bool, fn func(T) bool) {
	if t.root != nil {
		t.ascendBy(t.root, before, fn)
	}
}

// ascendBy walks the subtree n in order from the first item before does not
// hold for (nil: from the start).
func (t *btree[T]) ascendBy(n *bnode[T], before func(T) bool, fn func(T) bool) bool {
	i := 0
	if before != nil {
		i, _ = slices.BinarySearchFunc(n.items, struct{}{}, func(x T, _ struct{}) int {
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
// the first subtree it enters can hold items below pivot.
func (t *btree[T]) ascend(n *bnode[T], pivot *T, fn func(T) bool) bool {
	i := 0
	if pivot != nil {
		i, _ = t.find(n, *pivot)
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
