-- extend.lua: Extend renews a worker claim's lease: deadline = now + lease.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] task ID
-- ARGV[3] claim token (decimal)
-- ARGV[4] lease: µs, > 0
--
-- Returns:
--   {0, now, task}               the task as Extend left it
--   {1, detail}                  INVALID_ARGUMENT
--   {2, reason}                  STALE_CLAIM: missing | token
--   {4, state}                   TRANSITION: the task is not Running
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local deadline = later(now, ARGV[4], 'lease')
  local seq = load_seq()
  local t = claimed(ARGV[2], ARGV[3], seq)
  reserve(seq, 1)

  t.was = t.state
  t.version = seq + 1
  t.deadline = deadline
  move(t)
  redis.call('SET', KEYS[1], fmt(t.version))
  return answer(now, t)
end)
