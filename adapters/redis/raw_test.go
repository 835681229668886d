package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
)

// rawState is every key of a store as Redis holds it: key → a canonical
// rendering of its type and value. Tests compare two of them to prove an
// operation wrote nothing.
type rawState map[string]string

// dump reads every key under the store's prefix.
func dump(tb testing.TB, c goredis.UniversalClient, s *redis.Store) rawState {
	tb.Helper()
	ctx := context.Background()
	var keys []string
	iter := c.Scan(ctx, 0, s.Prefix()+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Fatalf("SCAN: %v", err)
	}
	out := rawState{}
	for _, k := range keys {
		if strings.Contains(k, "}:req:") {
			// A remembered answer: it must expire, and is not state.
			if ttl := c.TTL(ctx, k).Val(); ttl <= 0 || ttl > 15*time.Minute {
				tb.Errorf("memo key %s has TTL %v, want 0 < TTL <= 15m", k, ttl)
			}
			continue
		}
		ty, err := c.Type(ctx, k).Result()
		if err != nil {
			tb.Fatalf("TYPE %s: %v", k, err)
		}
		var v string
		switch ty {
		case "string":
			v = c.Get(ctx, k).Val()
		case "hash":
			m := c.HGetAll(ctx, k).Val()
			fields := make([]string, 0, len(m))
			for f, x := range m {
				fields = append(fields, fmt.Sprintf("%s=%q", f, x))
			}
			sort.Strings(fields)
			v = strings.Join(fields, " ")
		case "set":
			m := c.SMembers(ctx, k).Val()
			sort.Strings(m)
			v = fmt.Sprintf("%q", m)
		case "zset":
			var parts []string
			for _, z := range c.ZRangeWithScores(ctx, k, 0, -1).Val() {
				parts = append(parts, fmt.Sprintf("%v@%.17g", z.Member, z.Score))
			}
			v = strings.Join(parts, " ")
		default:
			v = "?"
		}
		out[k] = ty + ": " + v
	}
	return out
}

// diff describes the keys that differ, "" when none does.
func (r rawState) diff(other rawState) string {
	var out []string
	for k, v := range r {
		if w, ok := other[k]; !ok {
			out = append(out, fmt.Sprintf("  %s: deleted (was %s)", k, v))
		} else if v != w {
			out = append(out, fmt.Sprintf("  %s:\n    before %s\n    after  %s", k, v, w))
		}
	}
	for k, w := range other {
		if _, ok := r[k]; !ok {
			out = append(out, fmt.Sprintf("  %s: created: %s", k, w))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// unchanged fails unless after equals before, key for key.
func unchanged(tb testing.TB, what string, before, after rawState) {
	tb.Helper()
	if d := before.diff(after); d != "" {
		tb.Errorf("%s wrote to Redis:\n%s", what, d)
	}
}

// indexes lists the queue indexes (by name: ready, running, ids:failed, ...)
// that hold id, each with its score: "running@1700000000000000".
func indexes(tb testing.TB, c goredis.UniversalClient, s *redis.Store, queue, id string) []string {
	tb.Helper()
	ctx := context.Background()
	var out []string
	for name, key := range s.QueueKeys(queue) {
		if name == "seq" {
			continue
		}
		score, err := c.ZScore(ctx, key, id).Result()
		if err == goredis.Nil {
			continue
		}
		if err != nil {
			tb.Fatalf("ZSCORE %s %s: %v", key, id, err)
		}
		out = append(out, fmt.Sprintf("%s@%.17g", name, score))
	}
	slices.Sort(out)
	return out
}

// wantIndexes fails unless id is in exactly the named indexes, at the given
// scores ("name@score").
func wantIndexes(tb testing.TB, c goredis.UniversalClient, s *redis.Store, queue, id string, want ...string) {
	tb.Helper()
	slices.Sort(want)
	if got := indexes(tb, c, s, queue, id); !slices.Equal(got, want) {
		tb.Errorf("task %q is in indexes %v, want %v", id, got, want)
	}
}

// hash returns the task's stored fields by name (empty when there is none).
func hash(tb testing.TB, c goredis.UniversalClient, s *redis.Store, queue, id string) map[string]string {
	tb.Helper()
	v, err := c.Get(context.Background(), s.TaskKey(queue, id)).Result()
	if errors.Is(err, goredis.Nil) {
		return map[string]string{}
	}
	if err != nil {
		tb.Fatalf("GET: %v", err)
	}
	f, ok := redis.UnpackValues(v)
	if !ok || len(f) != len(redis.StoredFields) {
		tb.Fatalf("task %q: stored value %q does not unpack", id, v)
	}
	m := map[string]string{}
	for i, name := range redis.StoredFields {
		switch x := f[i].(type) {
		case bool:
			m[name] = "" // an unset time
		default:
			m[name] = fmt.Sprint(x)
		}
	}
	return m
}

// wantFields fails unless the stored hash has each field = value.
func wantFields(tb testing.TB, c goredis.UniversalClient, s *redis.Store, queue, id string, kv ...string) {
	tb.Helper()
	h := hash(tb, c, s, queue, id)
	for i := 0; i+1 < len(kv); i += 2 {
		if got, ok := h[kv[i]]; !ok || got != kv[i+1] {
			tb.Errorf("task %q: stored %s = %q (present %v), want %q", id, kv[i], got, ok, kv[i+1])
		}
	}
}
