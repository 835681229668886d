package redis_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/adapters/redis"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/redistest"
	"github.com/leasehold/leasehold/model"
)

// A server that refuses the client's credentials or rights (an ACL that
// denies a key pattern, the script commands or writes; a wrong password; a
// read-only replica) makes every operation fail with core.ErrPermission,
// never core.ErrCorrupt, and nothing is written. A user denied only
// FUNCTION and FCALL still works, on EVALSHA.
func TestPermissionRefusalsAreErrPermission(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client()
	for _, acl := range [][]any{
		{"ACL", "SETUSER", "otherkeys", "on", ">pw", "~other:*", "+@all"},
		{"ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "+@all", "-fcall", "-evalsha", "-eval", "-function"},
		{"ACL", "SETUSER", "readonly", "on", ">pw", "~*", "+@read", "+fcall", "+evalsha", "+eval", "+function", "+time", "+ping"},
		{"ACL", "SETUSER", "nofunctions", "on", ">pw", "~*", "+@all", "-function", "-fcall"},
	} {
		if err := admin.Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A replica refuses writes: READONLY.
	primary := redistest.Start(t)
	replica := redistest.Start(t)
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := replica.Client().Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}

	store := func(addr, user, pw string) *redis.Store {
		c := goredis.NewClient(&goredis.Options{Addr: addr, Username: user, Password: pw, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := redis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, s := range map[string]*redis.Store{
		"key pattern":    store(srv.Addr, "otherkeys", "pw"),
		"no scripts":     store(srv.Addr, "noscripts", "pw"),
		"read only user": store(srv.Addr, "readonly", "pw"),
		"wrong password": store(srv.Addr, "otherkeys", "nope"),
		"replica":        store(replica.Addr, "", ""),
	} {
		_, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}})
		if !errors.Is(err, core.ErrPermission) || errors.Is(err, core.ErrCorrupt) {
			t.Errorf("%s: Enqueue: %v, want ErrPermission", name, err)
		}
		if _, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1}); name != "read only user" && name != "replica" &&
			(!errors.Is(err, core.ErrPermission) || errors.Is(err, core.ErrCorrupt)) {
			t.Errorf("%s: Pop: %v, want ErrPermission", name, err)
		}
	}
	if err := store(replica.Addr, "", "").Preload(ctx); !errors.Is(err, core.ErrPermission) {
		t.Errorf("replica: Preload: %v, want ErrPermission", err)
	}
	if err := store(srv.Addr, "otherkeys", "nope").Preload(ctx); !errors.Is(err, core.ErrPermission) {
		t.Errorf("wrong password: Preload: %v, want ErrPermission", err)
	}
	if n, err := admin.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("the refused calls wrote %d keys (%v)", n, err)
	}

	s := store(srv.Addr, "nofunctions", "pw")
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "q", EnqueueArgs: model.EnqueueArgs{ID: "a", MaxAttempts: 1}}); err != nil {
		t.Fatalf("a user denied FUNCTION and FCALL: Enqueue: %v", err)
	}
	if r, err := s.Pop(ctx, core.PopParams{Queue: "q", Lease: time.Minute, N: 1}); err != nil || len(r.Tasks) != 1 {
		t.Fatalf("a user denied FUNCTION and FCALL: Pop: %v, %v", r, err)
	}
}
