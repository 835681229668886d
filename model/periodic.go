package model

import (
	"strings"
	"time"
)

// Periodic tasks. A schedule enqueues each of its occurrences as a task whose
// ID is derived from the schedule's name and the occurrence's time and from
// nothing else: not the clock of whoever enqueues it, not a counter, not a
// random value. Any number of schedulers running the same schedule over one
// store therefore enqueue an occurrence under the same ID, and Enqueue's rule
// that an ID is taken while a task holds it (in any state: ErrConflict) lets
// exactly one of them add it. The rule holds for as long as the task is kept:
// once a finished occurrence is pruned, its ID is free again, so a scheduler
// must not reach back further than the store keeps finished tasks (core's
// Periodic.CatchUp documents this).

// OccurrenceSeparator joins a schedule's name and an occurrence time in the
// occurrence's task ID.
const OccurrenceSeparator = "@"

// occurrenceLayout is the time part of an occurrence ID: UTC, to the
// microsecond the stores keep, always 27 bytes, so IDs of one schedule sort in
// time order.
const occurrenceLayout = "2006-01-02T15:04:05.000000Z"

// MaxScheduleNameLength is the longest schedule name: its occurrence IDs
// (name, separator, 27-byte time) must fit MaxIDLength.
const MaxScheduleNameLength = MaxIDLength - len(OccurrenceSeparator) - len(occurrenceLayout)

// ValidateScheduleName returns ErrInvalidArgument unless name has
// 1..MaxScheduleNameLength bytes and no OccurrenceSeparator.
func ValidateScheduleName(name string) error {
	if name == "" || len(name) > MaxScheduleNameLength {
		return invalid("schedule name %q must have 1..%d bytes", name, MaxScheduleNameLength)
	}
	if strings.Contains(name, OccurrenceSeparator) {
		return invalid("schedule name %q must not contain %q", name, OccurrenceSeparator)
	}
	return nil
}

// OccurrenceID is the task ID of the occurrence of the schedule called name
// at time at: the name, "@", and at in UTC truncated by Round, for example
// "report@2026-12-01T14:00:00.000000Z". It depends on nothing but its
// arguments. The name must pass ValidateScheduleName and at must be within
// the years 0000..9999 for the ID to be one Enqueue accepts.
func OccurrenceID(name string, at time.Time) string {
	return name + OccurrenceSeparator + Round(at).UTC().Format(occurrenceLayout)
}

// ParseOccurrenceID returns the schedule name and occurrence time of an ID
// OccurrenceID made; ok is false for any other ID.
func ParseOccurrenceID(id string) (name string, at time.Time, ok bool) {
	i := strings.LastIndex(id, OccurrenceSeparator)
	if i < 1 {
		return "", time.Time{}, false
	}
	at, err := time.Parse(occurrenceLayout, id[i+len(OccurrenceSeparator):])
	if err != nil || OccurrenceID(id[:i], at) != id {
		return "", time.Time{}, false
	}
	return id[:i], at, true
}
