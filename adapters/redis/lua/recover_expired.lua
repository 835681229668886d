-- recover_expired.lua: RecoverExpired decides every Running task whose
-- deadline is at or before now in one step, in order of deadline then ID,
-- at most limit: the lease-expired error is appended; a task with attempt
-- >= max_attempts is Failed, any other returns to the queue with run_after
-- = now + delay (Scheduled if that is after now, else Ready).
-- The damaged records it reaches are set aside in the same call and not
-- counted (see set_aside in lib.lua).
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks are found in the running
-- index; their keys are KEYS[11] .. ID).
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] delay: µs, >= 0
-- ARGV[3] limit: 0 for no limit
--
-- Returns:
--   {0, now, task, task, ...}    the tasks as it left them (each: ID, packed value)
--   {1, detail}                  INVALID_ARGUMENT
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local run_after = later(now, ARGV[2], 'delay')
  local limit = int(ARGV[3])
  if not limit or limit < 0 then refuse(INVALID, 'limit ' .. ARGV[3]) end
  local seq = load_seq()
  local m = recall_reply()
  if m then return m end
  local expired, aside = scan('running', fmt(now), limit, seq)
  reserve(seq, #expired)
  -- Every index a recovered task may enter, whichever way this batch's
  -- tasks go: a corrupt one refuses the call whatever the attempts.
  writable(2, 7, 3, 6, 5, 10)
  set_aside(aside)

  local out = {OK, fmt(now)}
  for _, t in ipairs(expired) do
    seq = seq + 1
    t.was = t.state
    t.version = seq
    t.errors = t.errors .. error_entry(t.attempt, now, true, 'lease expired')
    if t.attempt >= t.max_attempts then
      finish(t, 'failed', now)
    else
      queue_at(t, now, run_after)
    end
  end
  store_all(expired)
  for _, t in ipairs(expired) do emit(out, t) end
  if #expired > 0 then
    redis.call('SET', KEYS[1], fmt(seq))
    remember_reply(out)
  end
  return out
end)
