-- pop.lua: Pop claims up to n Ready tasks, highest priority first, then the
-- one that became Ready first. Each becomes Running with token = its new
-- version, attempt + 1, claimed_at = now, deadline = now + lease.
-- The damaged records it reaches are set aside in the same call and not
-- counted (see set_aside in lib.lua).
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks are found in the ready index;
-- their keys are KEYS[11] .. ID); KEYS[12] the paused key (see pause.lua):
-- while it exists, Pop claims nothing.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] lease: µs, > 0
-- ARGV[3] n: batch size, >= 1
--
-- Returns:
--   {0, now, task, task, ...}    the claimed tasks (each: ID, packed value)
--   {1, detail}                  INVALID_ARGUMENT
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local deadline = later(now, ARGV[2], 'lease')
  local n = int(ARGV[3])
  if not n or n < 1 then refuse(INVALID, 'batch ' .. ARGV[3]) end
  local seq = load_seq()
  local m = recall_reply()
  if m then return m end
  if redis.call('EXISTS', KEYS[12]) == 1 then return {OK, fmt(now)} end
  local first, aside = sift('ready', function(offset, count)
    return rcall(KEYS[2], 'ZRANGE', KEYS[2], fmt(offset), fmt(offset + count - 1), 'WITHSCORES')
  end, n, seq)
  reserve(seq, #first)
  set_aside(aside)

  local out = {OK, fmt(now)}
  for _, t in ipairs(first) do
    seq = seq + 1
    t.was = t.state
    t.version = seq
    t.state = 'running'
    t.token = seq
    t.attempt = t.attempt + 1
    t.claimed_at = now
    t.deadline = deadline
  end
  store_all(first)
  for _, t in ipairs(first) do emit(out, t) end
  if #first > 0 then
    redis.call('SET', KEYS[1], fmt(seq))
    remember_reply(out)
  end
  return out
end)
