package model

import "fmt"

// State is where a task is in its life. The zero value is not a state.
type State uint8

// The states of a task.
const (
	// Scheduled tasks wait for RunAfter; the mover (Promote) makes them Ready.
	Scheduled State = iota + 1
	// Ready tasks wait for a worker; Pop makes them Running.
	Ready
	// Running tasks are claimed by a worker under a lease. The worker (Ack,
	// Fail, Retry), a broker after the lease lapsed (Requeue, Finalize,
	// RecoverExpired) or an operator (InspectRequeue, Remove) moves them out.
	Running
	// Succeeded tasks were acknowledged by their worker. Terminal: only an
	// operator moves them (InspectRequeue, Remove, Prune).
	Succeeded
	// Failed tasks were failed by their worker, finalized by a broker or
	// cancelled by an operator (Cancel; their last error says so).
	// Terminal: only an operator moves them (InspectRequeue, Remove, Prune).
	Failed
	// Quarantined records were set aside because the store could not read
	// them (see "Damaged records" in the package documentation). They are
	// not tasks of a life cycle: they never run, no index reaches them, and
	// the only transition out is an operator's Remove. Quarantined is not
	// in States and not Valid; List and Counts accept it.
	Quarantined
)

// States lists every state of a task's life in order (Quarantined is not
// one of them).
var States = []State{Scheduled, Ready, Running, Succeeded, Failed}

var stateNames = [...]string{"", "scheduled", "ready", "running", "succeeded", "failed", "quarantined"}

// String returns the lower-case name of the state.
func (s State) String() string {
	if s.Listable() {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Valid reports whether s is one of the five states of a task's life.
func (s State) Valid() bool { return s >= Scheduled && s <= Failed }

// Listable reports whether s is a state List accepts: one of the five, or
// Quarantined.
func (s State) Listable() bool { return s.Valid() || s == Quarantined }

// Terminal reports whether s is Succeeded or Failed.
func (s State) Terminal() bool { return s == Succeeded || s == Failed }

// ParseState returns the state named by name (as printed by String),
// Quarantined included.
func ParseState(name string) (State, error) {
	for _, s := range append(States[:len(States):len(States)], Quarantined) {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q", ErrInvalidArgument, name)
}

// MarshalText encodes the state as its name.
func (s State) MarshalText() ([]byte, error) {
	if !s.Listable() {
		return nil, fmt.Errorf("%w: state %d", ErrInvalidArgument, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a state name.
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Op names an operation of the model.
type Op uint8

// The operations. The first group changes tasks (EnqueueBatch and AckBatch
// apply many Enqueues or Acks in one atomic step); Pause and Resume change
// the queue's paused flag and no task; the last three only read.
const (
	OpEnqueue Op = iota + 1
	OpPromote
	OpPop
	OpExtend
	OpAck
	OpFail
	OpRetry
	OpClaimExpired
	OpRequeue
	OpFinalize
	OpRecoverExpired
	OpInspectRequeue
	OpRemove
	OpPrune
	OpEnqueueBatch
	OpAckBatch
	OpPause
	OpResume
	OpCancel
	OpGet
	OpList
	OpCounts
)

// Ops lists every operation in order.
var Ops = []Op{
	OpEnqueue, OpPromote, OpPop, OpExtend, OpAck, OpFail, OpRetry,
	OpClaimExpired, OpRequeue, OpFinalize, OpRecoverExpired,
	OpInspectRequeue, OpRemove, OpPrune, OpEnqueueBatch, OpAckBatch,
	OpPause, OpResume, OpCancel, OpGet, OpList, OpCounts,
}

var opNames = [...]string{"", "Enqueue", "Promote", "Pop", "Extend", "Ack", "Fail", "Retry",
	"ClaimExpired", "Requeue", "Finalize", "RecoverExpired",
	"InspectRequeue", "Remove", "Prune", "EnqueueBatch", "AckBatch", "Pause", "Resume", "Cancel", "Get", "List", "Counts"}

// String returns the op's name.
func (o Op) String() string {
	if o >= OpEnqueue && o <= OpCounts {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// MarshalText encodes the op as its name.
func (o Op) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText decodes an op name.
func (o *Op) UnmarshalText(b []byte) error {
	for _, op := range Ops {
		if op.String() == string(b) {
			*o = op
			return nil
		}
	}
	return fmt.Errorf("%w: unknown op %q", ErrInvalidArgument, b)
}

// Counts is the number of tasks in each state, and of records set aside
// (Quarantined), with the queue's paused flag (see Queue.Pause).
type Counts struct {
	Scheduled, Ready, Running, Succeeded, Failed int
	Quarantined                                  int
	// Paused reports whether the queue is paused: Pop claims nothing.
	Paused bool
}

// Of returns the count for state s.
func (c Counts) Of(s State) int {
	switch s {
	case Scheduled:
		return c.Scheduled
	case Ready:
		return c.Ready
	case Running:
		return c.Running
	case Succeeded:
		return c.Succeeded
	case Failed:
		return c.Failed
	case Quarantined:
		return c.Quarantined
	}
	return 0
}

// Total returns the number of tasks in all states, quarantined records
// included.
func (c Counts) Total() int {
	return c.Scheduled + c.Ready + c.Running + c.Succeeded + c.Failed + c.Quarantined
}

// Pending returns the number of tasks not yet terminal.
func (c Counts) Pending() int { return c.Scheduled + c.Ready + c.Running }

func (c *Counts) add(s State, d int) {
	switch s {
	case Scheduled:
		c.Scheduled += d
	case Ready:
		c.Ready += d
	case Running:
		c.Running += d
	case Succeeded:
		c.Succeeded += d
	case Failed:
		c.Failed += d
	case Quarantined:
		c.Quarantined += d
	}
}
