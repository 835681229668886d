package postgres_test

import (
	"context"
	"log"

	"github.com/leasehold/leasehold/adapters/postgres"
)

// Open connects, creates or migrates the schema, and returns the store. (No
// output: it needs a server, so it is compiled, not run.)
func ExampleOpen() {
	ctx := context.Background()
	store, err := postgres.Open(ctx, "postgres://app@db:5432/app", postgres.WithSchema("jobs"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}
