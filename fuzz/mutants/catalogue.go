package mutants

// Mutant is one historical bug: the way a real queue went wrong, or would
// go wrong if one guard of the model were dropped.
type Mutant struct {
	// Name is the mutant's name, the first part of its patch files' names.
	Name string
	// Bug says in one line what the patched store does wrong.
	Bug string
	// Origin says where the bug comes from.
	Origin string
}

// The origins of the mutants.
const (
	RedisSeed  = "the Redis seed"  // seeds/000_…: the reaper's unguarded decisions
	SQLiteSeed = "the SQLite seed" // seeds/001_…: LiteQueue's claims without identity
	Guard      = "a model guard"   // a guard or rule of model/ dropped or bent
)

// Catalogue lists every mutant, in the order the runner reports them. Each
// has one patch per adapter in Adapters, named <name>.<adapter>.patch.
var Catalogue = []Mutant{
	{"requeue-without-guard", "a broker's Requeue applies whatever the task's version and state (the seed before its fix)", RedisSeed},
	{"ack-without-claim-check", "Ack succeeds for any caller that knows the task ID, whatever the token and state (done())", SQLiteSeed},
	{"fail-without-claim-check", "Fail succeeds for any caller that knows the task ID, whatever the token and state (mark_failed())", SQLiteSeed},
	{"retry-from-any-state", "Retry with the current token succeeds from every state, not only Running", SQLiteSeed},
	{"retry-keeps-lock-timestamp", "Retry returns the task to the queue with its old ClaimedAt (lock_time) in place", SQLiteSeed},
	{"recovery-read-then-write", "RecoverExpired reads the expired tasks, then writes them in a separate step without looking again", SQLiteSeed},
	{"decision-checks-state-not-version", "a broker's Requeue and Finalize check that the task is Running, not that its version is the claim's", RedisSeed},
	{"pop-does-not-advance-token", "Pop stamps a new version but hands out the version the task had while Ready as the token", Guard},
	{"extend-without-guard", "Extend renews the lease of a Running task for any claim, whatever its token", Guard},
	{"inspector-requeue-no-version-bump", "an operator's requeue changes the task without stamping a new version", Guard},
	{"lease-expiry-off-by-one", "ClaimExpired takes a lease as lapsed when its deadline is before now (< for <=)", Guard},
	{"token-reused-after-remove", "the sequence is the largest version in use (a rowid), so a remove gives versions and tokens out again", Guard},
}

// Adapters are the adapters the catalogue patches, named as the subtests of
// the linearizability package's TestRandomizedHistories.
var Adapters = []string{"memory", "redis"}
