package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/leasehold/leasehold/internal/pgtest"
)

func TestTheTransferAndTheAckCommitTogether(t *testing.T) {
	url := pgtest.URL(t)
	var out bytes.Buffer
	if err := run(context.Background(), url, pgtest.Schema(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `before: ada 100, bob 0
worker A claims with token 2
worker B claims with token 5
worker A's transfer: stale claim true (leasehold: stale claim: token 2 no longer holds task "transfer-1")
after A: ada 100, bob 0
worker B's first try: crashed before commit
after B's first try: ada 100, bob 0
after B's first try: task running
after B's second try: ada 70, bob 30
after B's second try: task succeeded
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
