-- promote.lua: Promote makes Ready every Scheduled task whose run_after is
-- at or before now, in order of run_after then ID, at most limit.
-- The damaged records it reaches are set aside in the same call and not
-- counted (see set_aside in lib.lua).
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks are found in the scheduled
-- index; their keys are KEYS[11] .. ID).
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] limit: 0 for no limit
--
-- Returns:
--   {0, now, id, id, ...}        the IDs promoted, in order
--   {1, detail}                  INVALID_ARGUMENT
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local limit = int(ARGV[2])
  if not limit or limit < 0 then refuse(INVALID, 'limit ' .. ARGV[2]) end
  local seq = load_seq()
  local m = recall()
  if m then
    local out = {OK, fmt(now)}
    for _, id in ipairs(m) do out[#out + 1] = id end
    return out
  end
  local due, aside = scan('scheduled', fmt(now), limit, seq)
  reserve(seq, #due)
  set_aside(aside)

  local out = {OK, fmt(now)}
  for _, t in ipairs(due) do
    seq = seq + 1
    t.was = t.state
    t.version = seq
    t.state = 'ready'
    out[#out + 1] = t.id
  end
  store_all(due)
  if #due > 0 then
    redis.call('SET', KEYS[1], fmt(seq))
    local ids = {}
    for i = 3, #out do ids[#ids + 1] = out[i] end
    remember(ids)
  end
  return out
end)
