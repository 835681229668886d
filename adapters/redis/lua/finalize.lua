-- finalize.lua: Finalize is a broker's decision to give up on a task after
-- its lease lapsed: the lease-expired error is appended and the task is
-- Failed. Like Requeue it applies only at the version the broker's claim
-- stamped.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] task ID
-- ARGV[3] the claim's version (decimal)
-- ARGV[4] message ('' for "lease expired")
--
-- Returns:
--   {0, now, task}               the task as Finalize left it
--   {1, detail}                  INVALID_ARGUMENT
--   {2, reason}                  STALE_CLAIM: missing | version
--   {4, state}                   TRANSITION: the task is not Running
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local message = ARGV[4]
  if message == '' then message = 'lease expired' end
  local seq = load_seq()
  local t = reaped(ARGV[2], ARGV[3], seq)
  reserve(seq, 1)

  t.was = t.state
  t.version = seq + 1
  t.errors = t.errors .. error_entry(t.attempt, now, true, message)
  finish(t, 'failed', now)
  move(t)
  redis.call('SET', KEYS[1], fmt(t.version))
  return answer(now, t)
end)
