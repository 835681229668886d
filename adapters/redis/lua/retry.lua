-- retry.lua: Retry records the handler's message and returns the task to
-- the queue after a delay on the store's clock: Scheduled if the delay is
-- not 0, else Ready.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] task ID
-- ARGV[3] claim token (decimal)
-- ARGV[4] delay: µs, 0..MaxDuration; run_after = now + delay ('0': none)
-- ARGV[5] message
--
-- Returns:
--   {0, now, task}               the task as Retry left it
--   {1, detail}                  INVALID_ARGUMENT
--   {2, reason}                  STALE_CLAIM: missing | token
--   {4, state}                   TRANSITION: the task is not Running
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local run_after = ARGV[4] ~= '0' and later(now, ARGV[4], 'delay')
  local seq = load_seq()
  local t = claimed(ARGV[2], ARGV[3], seq)
  reserve(seq, 1)

  t.was = t.state
  t.version = seq + 1
  t.errors = t.errors .. error_entry(t.attempt, now, false, ARGV[5])
  queue_at(t, now, run_after)
  move(t)
  redis.call('SET', KEYS[1], fmt(t.version))
  return answer(now, t)
end)
