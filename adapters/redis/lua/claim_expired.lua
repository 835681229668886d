-- claim_expired.lua: ClaimExpired hands a broker the Running tasks whose
-- deadline is at or before now, in order of deadline then ID, at most
-- limit. Expiry is judged in the same step that renews: each task gets
-- deadline = now + claim TTL and a new version, which the broker's claim
-- carries. The token is not changed, so the worker may still decide first.
-- The damaged records it reaches are set aside in the same call and not
-- counted (see set_aside in lib.lua).
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks are found in the running
-- index; their keys are KEYS[11] .. ID).
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] claim TTL: µs, > 0
-- ARGV[3] limit: 0 for no limit
--
-- Returns:
--   {0, now, task, task, ...}    the claimed tasks (each: ID, packed value)
--   {1, detail}                  INVALID_ARGUMENT
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local deadline = later(now, ARGV[2], 'claim TTL')
  local limit = int(ARGV[3])
  if not limit or limit < 0 then refuse(INVALID, 'limit ' .. ARGV[3]) end
  local seq = load_seq()
  local m = recall_reply()
  if m then return m end
  local expired, aside = scan('running', fmt(now), limit, seq)
  reserve(seq, #expired)
  set_aside(aside)

  local out = {OK, fmt(now)}
  for _, t in ipairs(expired) do
    seq = seq + 1
    t.was = t.state
    t.version = seq
    t.deadline = deadline
  end
  store_all(expired)
  for _, t in ipairs(expired) do emit(out, t) end
  if #expired > 0 then
    redis.call('SET', KEYS[1], fmt(seq))
    remember_reply(out)
  end
  return out
end)
