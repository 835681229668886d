// Package pgtest finds the PostgreSQL server tests run against and gives
// each test a schema of its own.
//
// The server is the one LEASEHOLD_POSTGRES_URL names, by default
// postgres://postgres@127.0.0.1:5432/test. When it does not answer, the
// tests that need it are skipped with a hint, except in CI (CI=true), where
// they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the server tests use when LEASEHOLD_POSTGRES_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test"

var (
	once   sync.Once
	reach  error
	theURL string
)

// URL returns the test server's connection string, or skips tb (fails it
// in CI) when the server does not answer.
func URL(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		theURL = os.Getenv("LEASEHOLD_POSTGRES_URL")
		if theURL == "" {
			theURL = DefaultURL
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, theURL)
		if err != nil {
			reach = err
			return
		}
		reach = conn.Ping(ctx)
		conn.Close(ctx)
	})
	if reach != nil {
		msg := "PostgreSQL at " + theURL + " does not answer (" + reach.Error() + "); start one (apt-get install postgresql) or set LEASEHOLD_POSTGRES_URL"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return theURL
}

// Schema returns a fresh schema name, "lh_test_" and 16 random hex digits.
func Schema() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "lh_test_" + hex.EncodeToString(b[:])
}

// Drop drops the named schema and everything in it.
func Drop(tb testing.TB, url, schema string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		tb.Errorf("drop schema %s: %v", schema, err)
	}
}

// Pool returns a pool on the test server shared by the test binary.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := URL(tb)
	poolOnce.Do(func() { pool, poolErr = pgxpool.New(context.Background(), url) })
	if poolErr != nil {
		tb.Fatal(poolErr)
	}
	return pool
}

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error

	recMu   sync.Mutex
	free    []string
	created []string
)

// Take returns a schema no other store uses until it is given back: a
// recycled one, emptied, or a new name (the store creates it). A suite
// that makes hundreds of stores so creates a few schemas instead of
// hundreds: creating and dropping tables costs far more than emptying them.
func Take() string {
	recMu.Lock()
	defer recMu.Unlock()
	if n := len(free); n > 0 {
		s := free[n-1]
		free = free[:n-1]
		return s
	}
	s := Schema()
	created = append(created, s)
	return s
}

// Give empties a schema's leasehold tables and makes it available to Take
// again; a schema it cannot empty is not reused.
func Give(tb testing.TB, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := Pool(tb).Exec(ctx, "DELETE FROM "+q+".tasks; DELETE FROM "+q+".queues"); err != nil {
		return
	}
	recMu.Lock()
	free = append(free, schema)
	recMu.Unlock()
}

// Main runs the tests, then drops every schema Take created. A package
// that uses Take calls it from its TestMain.
func Main(m interface{ Run() int }) int {
	code := m.Run()
	recMu.Lock()
	defer recMu.Unlock()
	if pool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range created {
			if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil && code == 0 {
				fmt.Fprintf(os.Stderr, "pgtest: drop schema %s: %v\n", s, err)
				code = 1
			}
		}
		pool.Close()
	}
	return code
}
