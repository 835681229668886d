package redis

import (
	"context"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/core"
)

var _ core.QueueLister = (*Store)(nil)

// Queues implements core.QueueLister: the queues whose sequence key
// (prefix{queue}:seq) exists, found with SCAN (on every primary of a
// cluster), sorted. SCAN walks the whole keyspace in steps, so this costs
// time in proportion to the database's keys, not the queues'; it is meant
// for operators' tools, not for a hot path.
func (s *Store) Queues(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, core.ErrClosed
	}
	pattern := globEscape(s.prefix) + "{*}:seq"
	var mu sync.Mutex
	seen := map[string]bool{}
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			if name, ok := s.queueOfSeqKey(it.Val()); ok {
				mu.Lock()
				seen[name] = true
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// queueOfSeqKey returns the queue whose sequence key is key.
func (s *Store) queueOfSeqKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"{")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "}:seq")
	if !ok || core.ValidateQueueName(name) != nil {
		return "", false
	}
	return name, true
}

// globEscape escapes the characters SCAN's MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
