// Package mutants is the catalogue of historical bugs the linearizability
// harness must catch, and the runner that checks it does.
//
// Each mutant (Catalogue) is a bug a real queue had (the two seeds: the
// Redis reaper's unguarded decisions, LiteQueue's claims without identity),
// one guard of the model dropped or bent, a slip at an edge of the store
// contract (many tasks in one state, sub-microsecond clock readings, slices
// shared with the caller), or a rule of the Worker or Broker broken. It
// comes as one small patch per target, <name>.<target>.patch in this
// folder: a unified diff of the real source of an adapter (for Redis, its
// Lua scripts) or of package core, after one line naming the mutant.
//
// Evaluate applies each patch to a copy of the module, builds the
// linearizability package's test binary once, and runs one of its
// randomized entry points (never the scripted spec scenarios) several times
// with different seeds, each time until a history is found wrong or the
// run's budget has passed: for an adapter's patch TestRandomizedHistories on
// that adapter (store-level plans, checked for linearizability), for a
// patch of core TestRuntimeHistories on the memory adapter (real Workers,
// Brokers and an Inspector, checked for linearizability and the runtime
// properties). The
// command fuzz/mutants/cmd/mutants (`make mutants`) prints the table; the
// package's tests check that every patch still applies to the current
// source and run the whole catalogue with a small budget.
//
// # Making a patch again
//
// When an adapter changes under a patch, TestPatchesApply names it. Make the
// same change to the new source in a scratch copy of the module (a git
// worktree, say) and write the diff over the old patch, keeping its first
// line:
//
//	git diff -- adapters/redis/lua/requeue.lua > diff
//	(head -2 fuzz/mutants/requeue-without-guard.redis.patch; cat diff) > new
//
// A new mutant is a line in Catalogue (its targets among them) and one
// patch per target.
package mutants
