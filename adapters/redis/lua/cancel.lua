-- cancel.lua: Cancel is an operator's cancellation: a Scheduled, Ready or
-- Running task becomes Failed at once, with the cancellation appended to
-- its errors (flag 2, see parse_errors). A Running task keeps its token, so
-- a worker's later op under it is refused as cancelled (see claimed).
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] task ID
-- ARGV[3] expected version (decimal), '0' for any
-- ARGV[4] the message recorded
--
-- Returns:
--   {0, now, task}               the task as Cancel left it
--   {3}                          NOT_FOUND
--   {4, state}                   TRANSITION: the task is Succeeded or Failed
--   {6, version}                 VERSION_CONFLICT: the task is at version
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local seq = load_seq()
  local t = inspected(ARGV[2], ARGV[3], seq)
  if t.state ~= 'scheduled' and t.state ~= 'ready' and t.state ~= 'running' then refuse(TRANSITION, t.state) end
  check_indexed(t)
  reserve(seq, 1)

  t.was = t.state
  t.version = seq + 1
  t.errors = t.errors .. error_entry(t.attempt, now, 'cancelled', ARGV[4])
  finish(t, 'failed', now)
  move(t)
  redis.call('SET', KEYS[1], fmt(t.version))
  return answer(now, t)
end)
