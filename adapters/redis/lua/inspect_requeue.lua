-- inspect_requeue.lua: InspectRequeue is an operator's requeue: the task
-- becomes Ready with a fresh set of attempts (attempt = 0), its run_after,
-- result and claim cleared and its error history kept. Legal from every
-- state but Ready.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] now: µs, or '' for the server's TIME (only reported)
-- ARGV[2] task ID
-- ARGV[3] expected version (decimal), '0' for any
--
-- Returns:
--   {0, now, task}               the task as InspectRequeue left it
--   {3}                          NOT_FOUND
--   {4, state}                   TRANSITION: the task is Ready
--   {6, version}                 VERSION_CONFLICT: the task is at version
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local seq = load_seq()
  local t = inspected(ARGV[2], ARGV[3], seq)
  if t.state == 'ready' or t.state == 'quarantined' then refuse(TRANSITION, t.state) end
  check_indexed(t)
  reserve(seq, 1)

  t.was = t.state
  t.version = seq + 1
  t.attempt = 0
  t.result = ''
  queue_at(t, 0, false)
  move(t)
  redis.call('SET', KEYS[1], fmt(t.version))
  return answer(now, t)
end)
