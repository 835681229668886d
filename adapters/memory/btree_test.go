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
func verify[T any](t *btree[T]) ([]T, error) {
	var out []T
	leafDepth := -1
	var walk func(n *bnode[T], depth int, root bool) error
	walk = func(n *bnode[T], depth int, root bool) error {
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
		if t.cmp(out[i-1], out[i]) >= 0 {
			return nil, fmt.Errorf("items %d and %d out of order", i-1, i)
		}
	}
	if len(out) != t.size {
		return nil, fmt.Errorf("size %d, %d items", t.size, len(out))
	}
	return out, nil
}

func ascendAll[T any](t *btree[T]) []T {
	var out []T
	t.Ascend(func(x T) bool { out = append(out, x); return true })
	return out
}

// TestBTreeMatchesASortedSetUnderRandomOperations drives trees of several
// degrees with random inserts and deletes (including of absent and duplicate
// items) and compares every answer and the whole content with a map.
func TestBTreeMatchesASortedSetUnderRandomOperations(t *testing.T) {
	for _, degree := range []int{2, 3, 4, 32} {
		t.Run(fmt.Sprintf("degree%d", degree), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(degree), 7))
			tr := newBTree(cmp.Compare[int], degree)
			ref := map[int]bool{}
			const keys = 3000
			for step := range 40000 {
				k := rng.IntN(keys)
				// Phases: mostly grow, then mostly shrink, so the tree is
				// built up and torn down to empty.
				grow := (step/10000)%2 == 0
				if rng.IntN(10) < 7 == grow {
					if got, want := tr.Insert(k), !ref[k]; got != want {
						t.Fatalf("step %d: Insert(%d) = %v, want %v", step, k, got, want)
					}
					ref[k] = true
				} else {
					if got, want := tr.Delete(k), ref[k]; got != want {
						t.Fatalf("step %d: Delete(%d) = %v, want %v", step, k, got, want)
					}
					delete(ref, k)
				}
				if step%997 == 0 || len(ref) < 10 {
					checkAgainst(t, tr, ref)
				}
			}
			for k := range ref {
				tr.Delete(k)
			}
			if tr.Len() != 0 || tr.root == nil || len(tr.root.items) != 0 || tr.root.kids != nil {
				t.Fatalf("emptied tree: len %d, root %+v", tr.Len(), tr.root)
			}
			if _, err := verify(tr); err != nil {
				t.Fatal(err)
			}
			if _, ok := tr.Min(); ok {
				t.Fatal("Min of an empty tree reports an item")
			}
		})
	}
}

func checkAgainst(t *testing.T, tr *btree[int], ref map[int]bool) {
	t.Helper()
	items, err := verify(tr)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int, 0, len(ref))
	for k := range ref {
		want = append(want, k)
	}
	slices.Sort(want)
	if !slices.Equal(items, want) {
		t.Fatalf("tree holds %d items, set %d", len(items), len(want))
	}
	if got := ascendAll(tr); !slices.Equal(got, want) {
		t.Fatalf("Ascend gives %d items, want %d", len(got), len(want))
	}
	if m, ok := tr.Min(); ok != (len(want) > 0) || (ok && m != want[0]) {
		t.Fatalf("Min = %d, %v; want first of %v", m, ok, want[:min(3, len(want))])
	}
}

// TestBTreeAscendFromStartsAtThePivot checks AscendFrom for pivots that are
// in the tree, between items, before the first and after the last, and that
// stopping early stops.
func TestBTreeAscendFromStartsAtThePivot(t *testing.T) {
	for _, degree := range []int{2, 5, 32} {
		tr := newBTree(cmp.Compare[int], degree)
		var all []int
		for k := 0; k < 2000; k += 2 {
			tr.Insert(k)
			all = append(all, k)
		}
		for _, pivot := range []int{-5, 0, 1, 2, 999, 1000, 1001, 1998, 1999, 5000} {
			var got []int
			tr.AscendFrom(pivot, func(x int) bool { got = append(got, x); return true })
			i, _ := slices.BinarySearch(all, pivot)
			if !slices.Equal(got, all[i:]) {
				t.Fatalf("degree %d: AscendFrom(%d) gives %d items starting %v, want %d", degree, pivot, len(got), got[:min(3, len(got))], len(all[i:]))
			}
			var some []int
			tr.AscendFrom(pivot, func(x int) bool { some = append(some, x); return len(some) < 3 })
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
	ready := newBTree(compareReady, 2)
	for _, it := range []readyItem{{0, 5, 0}, {10, 9, 0}, {-3, 1, 0}, {10, 2, 0}, {0, 4, 0}} {
		ready.Insert(it)
	}
	var got []string
	ready.Ascend(func(it readyItem) bool { got = append(got, fmt.Sprintf("%d/%d", it.priority, it.version)); return true })
	if want := []string{"10/2", "10/9", "0/4", "0/5", "-3/1"}; !slices.Equal(got, want) {
		t.Fatalf("ready order %v, want %v", got, want)
	}

	q := newQueue("q", 0)
	times := newBTree(q.compareTime, 2)
	for _, x := range []struct {
		sec int64
		id  string
	}{{2, "a"}, {1, "b"}, {1, "B"}, {1, "a"}, {0, "z"}, {1, "a\x00"}, {1, "0123456789abcdefX"}, {1, "0123456789abcdef"}} {
		tk := &task{Task: *taskWithID(x.id)}
		q.add(tk)
		times.Insert(timeItem{at: micros(epoch.Add(secs(x.sec))), k: tk.key, h: tk.h})
	}
	got = nil
	times.Ascend(func(it timeItem) bool { got = append(got, q.slab[it.h].ID); return true })
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
	tr := newBTree(cmp.Compare[int], defaultDegree)
	perm := rand.New(rand.NewPCG(1, 2)).Perm(n)
	for _, k := range perm {
		tr.Insert(k)
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
			tr.Delete(k)
		}
	}
	items, err := verify(tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != n/2 || items[0] != 0 || items[len(items)-1] != n-2 {
		t.Fatalf("after deletes: %d items from %d to %d", len(items), items[0], items[len(items)-1])
	}
}
