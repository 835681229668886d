package memory

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/model"
)

var epoch = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func secs(n int64) time.Duration { return time.Duration(n) * time.Second }

func taskWithID(id string) *model.Task { return &model.Task{ID: id} }

// verify checks the shape of t: items in strict order within and across
// nodes, every node but the root holding degree-1..2*degree-1 items, every
// inner node one more child than items, all leaves at one depth, and size
// equal to the number of items. It returns the items in order.
func verify(t *btree) ([]entry, error) {
	var out []entry
	leafDepth := -1
	var walk func(n *bnode, depth int, root bool) error
	walk = func(n *bnode, depth int, root bool) error {
		if !root && (len(n.items) < t.degree-1 || len(n.items) > t.maxItems()) {
			return fmt.Errorf("node at depth %d holds %d items (degree %d)", depth, len(n.items), t.degree)
		}
		if root && len(n.items) == 0 && (n.kids != nil || t.size != 0) {
			return fmt.Errorf("empty root of a tree of %d items", t.size)
		}
		if n.kids == nil {
			if leafDepth == -1 {
				leafDepth = depth
			} else if leafDepth != depth {
				return fmt.Errorf("leaves at depths %d and %d", leafDepth, depth)
			}
			out = append(out, n.items...)
			return nil
		}
		if len(n.kids) != len(n.items)+1 {
			return fmt.Errorf("inner node with %d items has %d children", len(n.items), len(n.kids))
		}
		for i, k := range n.kids {
			if err := walk(k, depth+1, false); err != nil {
				return err
			}
			if i < len(n.items) {
				out = append(out, n.items[i])
			}
		}
		return nil
	}
	if t.root != nil {
		if err := walk(t.root, 0, true); err != nil {
			return nil, err
		}
	}
	for i := 1; i < len(out); i++ {
		if t.compare(&out[i-1], &out[i]) >= 0 {
			return nil, fmt.Errorf("items %d and %d out of order", i-1, i)
		}
	}
	if len(out) != t.size {
		return nil, fmt.Errorf("size %d, %d items", t.size, len(out))
	}
	if len(t.pool.free) > maxFreeNodes {
		return nil, fmt.Errorf("%d nodes kept for reuse, at most %d", len(t.pool.free), maxFreeNodes)
	}
	for _, n := range t.pool.free {
		if len(n.items) != 0 || len(n.kids) != 0 || slices.ContainsFunc(n.kids[:cap(n.kids)], func(k *bnode) bool { return k != nil }) {
			return nil, fmt.Errorf("a node kept for reuse holds %d entries and %d subtrees", len(n.items), len(n.kids))
		}
	}
	return out, nil
}

func ascendAll(t *btree) []entry {
	var out []entry
	t.Ascend(func(x entry) bool { out = append(out, x); return true })
	return out
}

// ent is the entry of k in the random-operation tests: its three words are
// k's digits above the last, and its handle the last digit, which the tie
// function of those tests (tieDown) orders from high to low. So entries
// differ in each word and in their handle alone, and every branch of the
// comparison is taken.
func ent(k int) entry {
	return entry{k0: uint64(k / 1000), k1: uint64(k / 100 % 10), k2: uint64(k / 10 % 10), h: uint32(k % 10)}
}

func tieDown(a, b uint32) int { return cmp.Compare(b, a) }

// entOrder is the order of the entries of a and b, written out: by k/10,
// then by the last digit, high to low.
func entOrder(a, b int) int {
	if c := cmp.Compare(a/10, b/10); c != 0 {
		return c
	}
	return cmp.Compare(b%10, a%10)
}

// word is the entry of k in the tests that need one word only.
func word(k int) entry { return entry{k0: signed(int64(k))} }

func words(es []entry) []int {
	out := make([]int, len(es))
	for i, e := range es {
		out[i] = int(int64(e.k0 ^ 1<<63))
	}
	return out
}

// TestBTreeMatchesASortedSetUnderRandomOperations drives trees of several
// degrees with random inserts and deletes (including of absent and duplicate
// items) and compares every answer and the whole content with a map.
func TestBTreeMatchesASortedSetUnderRandomOperations(t *testing.T) {
	for _, degree := range []int{2, 3, 4, 32} {
		t.Run(fmt.Sprintf("degree%d", degree), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(degree), 7))
			tr := newBTree(tieDown, degree, nil)
			ref := map[int]bool{}
			const keys = 3000
			for step := range 40000 {
				k := rng.IntN(keys)
				// Phases: mostly grow, then mostly shrink, so the tree is
				// built up and torn down to empty.
				grow := (step/10000)%2 == 0
				if rng.IntN(10) < 7 == grow {
					if got, want := tr.Insert(ent(k)), !ref[k]; got != want {
						t.Fatalf("step %d: Insert(%d) = %v, want %v", step, k, got, want)
					}
					ref[k] = true
				} else {
					if got, want := tr.Delete(ent(k)), ref[k]; got != want {
						t.Fatalf("step %d: Delete(%d) = %v, want %v", step, k, got, want)
					}
					delete(ref, k)
				}
				if step%997 == 0 || len(ref) < 10 {
					checkAgainst(t, &tr, ref)
				}
			}
			for k := range ref {
				tr.Delete(ent(k))
			}
			if tr.Len() != 0 || tr.root == nil || len(tr.root.items) != 0 || tr.root.kids != nil {
				t.Fatalf("emptied tree: len %d, root %+v", tr.Len(), tr.root)
			}
			if _, err := verify(&tr); err != nil {
				t.Fatal(err)
			}
			if _, ok := tr.Min(); ok {
				t.Fatal("Min of an empty tree reports an item")
			}
			if _, ok := tr.DeleteMin(); ok {
				t.Fatal("DeleteMin of an empty tree reports an item")
			}
		})
	}
}

func checkAgainst(t *testing.T, tr *btree, ref map[int]bool) {
	t.Helper()
	items, err := verify(tr)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]int, 0, len(ref))
	for k := range ref {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, entOrder)
	want := make([]entry, len(keys))
	for i, k := range keys {
		want[i] = ent(k)
	}
	if !slices.Equal(items, want) {
		t.Fatalf("tree holds %d items, set %d", len(items), len(want))
	}
	if got := ascendAll(tr); !slices.Equal(got, want) {
		t.Fatalf("Ascend gives %d items, want %d", len(got), len(want))
	}
	if m, ok := tr.Min(); ok != (len(want) > 0) || (ok && m != want[0]) {
		t.Fatalf("Min = %v, %v; want first of %v", m, ok, want[:min(3, len(want))])
	}
}

// TestBTreeDeleteMinTakesEntriesInOrder drains trees of several degrees
// with DeleteMin, interleaved with inserts of entries above and below the
// ones left, and checks each entry taken against a sorted set, and the
// tree's shape on the way.
func TestBTreeDeleteMinTakesEntriesInOrder(t *testing.T) {
	for _, degree := range []int{2, 3, 32} {
		rng := rand.New(rand.NewPCG(uint64(degree), 11))
		tr := newBTree(tieDown, degree, nil)
		ref := map[int]bool{}
		for range 3000 {
			k := rng.IntN(100_000)
			tr.Insert(ent(k))
			ref[k] = true
		}
		for step := 0; len(ref) > 0; step++ {
			if step%5 == 0 && step < 4000 {
				k := rng.IntN(100_000)
				tr.Insert(ent(k))
				ref[k] = true
			}
			keys := make([]int, 0, len(ref))
			for k := range ref {
				keys = append(keys, k)
			}
			first := slices.MinFunc(keys, entOrder)
			got, ok := tr.DeleteMin()
			if !ok || got != ent(first) {
				t.Fatalf("degree %d, step %d: DeleteMin = %v, %v; want %v", degree, step, got, ok, ent(first))
			}
			delete(ref, first)
			if step%97 == 0 || len(ref) < 70 {
				checkAgainst(t, &tr, ref)
			}
		}
		if tr.Len() != 0 {
			t.Fatalf("degree %d: %d entries left after draining", degree, tr.Len())
		}
	}
}

// TestBTreeReusesNodes checks that a tree filled and emptied again and again
// by a batch takes its nodes from the ones it kept, and keeps no more than
// maxFreeNodes.
func TestBTreeReusesNodes(t *testing.T) {
	tr := newBTree(nil, defaultDegree, nil)
	fill := func(round int) {
		for k := range 200 {
			tr.Insert(word(round*1000 + k))
		}
		for range 200 {
			tr.DeleteMin()
		}
	}
	fill(0) // the first round allocates the nodes
	if allocs := testing.AllocsPerRun(20, func() { fill(1) }); allocs != 0 {
		t.Fatalf("a round of 200 inserts and deletes allocates %v times", allocs)
	}
	if _, err := verify(&tr); err != nil {
		t.Fatal(err)
	}
	if len(tr.pool.free) == 0 {
		t.Fatal("an emptied tree kept no node")
	}
}

// TestBTreeAscendFromStartsAtThePivot checks AscendFrom for pivots that are
// in the tree, between items, before the first and after the last, and that
// stopping early stops.
func TestBTreeAscendFromStartsAtThePivot(t *testing.T) {
	for _, degree := range []int{2, 5, 32} {
		tr := newBTree(nil, degree, nil)
		var all []int
		for k := 0; k < 2000; k += 2 {
			tr.Insert(word(k))
			all = append(all, k)
		}
		for _, pivot := range []int{-5, 0, 1, 2, 999, 1000, 1001, 1998, 1999, 5000} {
			var got []int
			tr.AscendFrom(word(pivot), func(x entry) bool { got = append(got, words([]entry{x})[0]); return true })
			i, _ := slices.BinarySearch(all, pivot)
			if !slices.Equal(got, all[i:]) {
				t.Fatalf("degree %d: AscendFrom(%d) gives %d items starting %v, want %d", degree, pivot, len(got), got[:min(3, len(got))], len(all[i:]))
			}
			var some []int
			tr.AscendFrom(word(pivot), func(x entry) bool { some = append(some, words([]entry{x})[0]); return len(some) < 3 })
			if want := all[i:min(i+3, len(all))]; !slices.Equal(some, want) {
				t.Fatalf("degree %d: AscendFrom(%d) stopped after 3 gives %v, want %v", degree, pivot, some, want)
			}
		}
	}
}

// TestIndexesOrderTasksAsTheModelDoes checks the comparison functions of the
// order indexes: priority descending then version ascending for Ready; time
// then ID (byte order) for the others.
func TestIndexesOrderTasksAsTheModelDoes(t *testing.T) {
	q := newQueue("q", 0)
	ready := newBTree(nil, 2, nil)
	for _, x := range []struct {
		priority int
		version  uint64
	}{{0, 5}, {10, 9}, {-3, 1}, {10, 2}, {0, 4}, {model.MaxPriority, 7}, {model.MinPriority, 3}} {
		tk := &task{Task: model.Task{ID: fmt.Sprint(x.version), Priority: x.priority, Version: x.version}}
		q.add(tk)
		ready.Insert(readyEntry(tk))
	}
	var got []string
	ready.Ascend(func(it entry) bool {
		got = append(got, fmt.Sprintf("%d/%d", q.slab[it.h].Priority, q.slab[it.h].Version))
		return true
	})
	if want := []string{fmt.Sprintf("%d/7", model.MaxPriority), "10/2", "10/9", "0/4", "0/5", "-3/1", fmt.Sprintf("%d/3", model.MinPriority)}; !slices.Equal(got, want) {
		t.Fatalf("ready order %v, want %v", got, want)
	}

	times := newBTree(q.tieIDs, 2, nil)
	for _, x := range []struct {
		sec int64
		id  string
	}{{2, "a"}, {1, "b"}, {1, "B"}, {1, "a"}, {0, "z"}, {1, "a\x00"}, {1, "0123456789abcdefX"}, {1, "0123456789abcdef"}} {
		tk := &task{Task: *taskWithID(x.id)}
		q.add(tk)
		times.Insert(timeEntry(epoch.Add(secs(x.sec)), tk))
	}
	got = nil
	times.Ascend(func(it entry) bool { got = append(got, q.slab[it.h].ID); return true })
	if want := []string{"z", "0123456789abcdef", "0123456789abcdefX", "B", "a", "a\x00", "b", "a"}; !slices.Equal(got, want) {
		t.Fatalf("time order %v, want %v", got, want)
	}
}

// TestBTreeHoldsManyItemsShallowly checks a large tree stays valid and
// shallow (four levels hold a million items; this test keeps the race
// detector's time down with a quarter of that), and that deleting every other
// item keeps it valid.
func TestBTreeHoldsManyItemsShallowly(t *testing.T) {
	n := 250_000
	if testing.Short() {
		n = 50_000
	}
	tr := newBTree(nil, defaultDegree, nil)
	perm := rand.New(rand.NewPCG(1, 2)).Perm(n)
	for _, k := range perm {
		tr.Insert(word(k))
	}
	depth := 0
	for nd := tr.root; nd != nil; depth++ {
		if nd.kids == nil {
			break
		}
		nd = nd.kids[0]
	}
	// A B-tree of minimum degree d holding n items is at most
	// log_d((n+1)/2) levels deep below its root.
	bound := 0
	for c := (n + 1) / 2; c >= defaultDegree; c /= defaultDegree {
		bound++
	}
	if depth > bound {
		t.Fatalf("depth %d for %d items, bound %d", depth, n, bound)
	}
	for _, k := range perm {
		if k%2 == 1 {
			tr.Delete(word(k))
		}
	}
	es, err := verify(&tr)
	if err != nil {
		t.Fatal(err)
	}
	items := words(es)
	if len(items) != n/2 || items[0] != 0 || items[len(items)-1] != n-2 {
		t.Fatalf("after deletes: %d items from %d to %d", len(items), items[0], items[len(items)-1])
	}
}
