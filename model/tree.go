package model

// tree is a persistent (immutable) ordered map from string keys to values: a
// treap with path copying. Every update returns a new tree that shares all
// untouched nodes with the old one, so a Queue can be copied for the price of a
// struct and an op costs O(log n) no matter how many tasks the queue holds.
//
// Node priorities are a hash of the key, so the shape of a tree depends only on
// the set of keys it holds: the model stays deterministic.
type tree[V any] struct {
	root *node[V]
	size int
}

type node[V any] struct {
	key         string
	val         V
	prio        uint64
	left, right *node[V]
}

// keyPriority hashes a key to its node priority: FNV-1a, then the murmur3
// finalizer. FNV-1a alone keeps too much of the order of sequential keys
// ("t1", "t2", ...), which left the treaps hundreds of levels deep.
func keyPriority(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Len returns the number of keys.
func (t tree[V]) Len() int { return t.size }

// Get returns the value stored under key.
func (t tree[V]) Get(key string) (V, bool) {
	n := t.root
	for n != nil {
		switch {
		case key < n.key:
			n = n.left
		case key > n.key:
			n = n.right
		default:
			return n.val, true
		}
	}
	var zero V
	return zero, false
}

// Put returns a tree in which key maps to val.
func (t tree[V]) Put(key string, val V) tree[V] {
	root, added := t.root.insert(key, keyPriority(key), val)
	t.root = root
	if added {
		t.size++
	}
	return t
}

// Delete returns a tree without key.
func (t tree[V]) Delete(key string) tree[V] {
	root, removed := t.root.remove(key)
	if removed {
		t.root = root
		t.size--
	}
	return t
}

// Ascend calls fn for each key ≥ from in ascending order until fn returns false.
func (t tree[V]) Ascend(from string, fn func(key string, val V) bool) {
	t.root.ascend(from, fn)
}

func (n *node[V]) insert(key string, prio uint64, val V) (*node[V], bool) {
	if n == nil {
		return &node[V]{key: key, val: val, prio: prio}, true
	}
	c := *n
	var added bool
	switch {
	case key < n.key:
		c.left, added = n.left.insert(key, prio, val)
		if c.left.prio > c.prio { // rotate right; c.left is a fresh copy
			l := c.left
			c.left = l.right
			l.right = &c
			return l, added
		}
	case key > n.key:
		c.right, added = n.right.insert(key, prio, val)
		if c.right.prio > c.prio { // rotate left; c.right is a fresh copy
			r := c.right
			c.right = r.left
			r.left = &c
			return r, added
		}
	default:
		c.val = val
	}
	return &c, added
}

func (n *node[V]) remove(key string) (*node[V], bool) {
	if n == nil {
		return nil, false
	}
	switch {
	case key < n.key:
		l, ok := n.left.remove(key)
		if !ok {
			return n, false
		}
		c := *n
		c.left = l
		return &c, true
	case key > n.key:
		r, ok := n.right.remove(key)
		if !ok {
			return n, false
		}
		c := *n
		c.right = r
		return &c, true
	default:
		return merge(n.left, n.right), true
	}
}

// merge joins two treaps where every key of a is below every key of b.
func merge[V any](a, b *node[V]) *node[V] {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		c := *a
		c.right = merge(a.right, b)
		return &c
	default:
		c := *b
		c.left = merge(a, b.left)
		return &c
	}
}

func (n *node[V]) ascend(from string, fn func(string, V) bool) bool {
	if n == nil {
		return true
	}
	if from <= n.key {
		if !n.left.ascend(from, fn) {
			return false
		}
		if !fn(n.key, n.val) {
			return false
		}
	}
	return n.right.ascend(from, fn)
}
