-- prune.lua: Prune deletes terminal tasks in the given states whose
-- finished_at is before `before`, oldest first (then by ID), at most limit,
-- and returns their IDs. Older tasks of other states are passed over.
-- A damaged record (see set_aside in lib.lua) it reaches is deleted when
-- its packed value still names a wanted state, else set aside.
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks are found in the finished
-- index; their keys are KEYS[11] .. ID).
-- ARGV[1] now: µs, or '' for the server's TIME (only reported)
-- ARGV[2] before: µs (exclusive)
-- ARGV[3] limit: 0 for no limit
-- ARGV[4..] the states to prune: succeeded and/or failed
--
-- Returns:
--   {0, now, id, id, ...}        the IDs deleted, in order
--   {1, detail}                  INVALID_ARGUMENT
--   {8, key, detail}             CORRUPT
return run(function()
  local now = clock(ARGV[1])
  local before = int(ARGV[2])
  if not before then refuse(INVALID, 'before ' .. ARGV[2]) end
  local limit = int(ARGV[3])
  if not limit or limit < 0 then refuse(INVALID, 'limit ' .. ARGV[3]) end
  local want = {}
  for i = 4, #ARGV - 1 do
    if ARGV[i] ~= 'succeeded' and ARGV[i] ~= 'failed' then refuse(INVALID, 'state ' .. ARGV[i]) end
    want[ARGV[i]] = true
  end
  local seq = load_seq()
  local m = recall()
  if m then
    local out = {OK, fmt(now)}
    for _, id in ipairs(m) do out[#out + 1] = id end
    return out
  end
  local k = KEYS[5]
  local doomed, aside, broken = {}, {}, false
  -- Page through the finished index so a small limit reads little.
  local offset, page = 0, 256
  while limit == 0 or #doomed < limit do
    local r = rcall(k, 'ZRANGEBYSCORE', k, '-inf', '(' .. fmt(before), 'WITHSCORES', 'LIMIT', offset, page)
    for i = 1, #r, 2 do
      if limit > 0 and #doomed == limit then break end
      local id = r[i]
      local t, why, was, stray = judge(id, 'finished', r[i + 1], seq)
      local st = t and t.state
      if stray then
        aside[#aside + 1] = {id = id, key = KEYS[11] .. id, stray = 5}
        st = nil
      elseif not t then
        -- A damaged record whose packed value still names its state is
        -- pruned as that state; one that does not is set aside.
        local a = record_fields(was or '')
        if a then st = a[3] end
      end
      if st == 'succeeded' or st == 'failed' then
        if want[st] then
          doomed[#doomed + 1] = t or {id = id, key = KEYS[11] .. id}
          if not t then broken = true end
        end
      elseif not stray then
        why = why or ('state ' .. tostring(st) .. ' but listed as finished')
        aside[#aside + 1] = {id = id, key = KEYS[11] .. id, reason = why, was = was}
      end
    end
    if #r < 2 * page then break end
    offset = offset + page
  end

  if broken then writable_all() end
  local released = {}
  for _, t in ipairs(doomed) do
    if t.state and releases(t) then released[#released + 1] = t.unique_key end
  end
  set_aside(aside)
  -- After set_aside, which checked the registry's type when it wrote
  -- anything; else this is the first write and checks it itself.
  if #doomed > 0 then
    local ids = {}
    for _, t in ipairs(doomed) do ids[#ids + 1] = t.id end
    unregister_first(ids)
  end
  if #released > 0 then bulk('HDEL', ukey(), released, 1) end
  local out = {OK, fmt(now)}
  for _, t in ipairs(doomed) do
    if t.state then unindex(t) else drop(t.id) end
    redis.call('DEL', t.key)
    out[#out + 1] = t.id
  end
  if #doomed > 0 then
    local ids = {}
    for i = 3, #out do ids[#ids + 1] = out[i] end
    remember(ids)
  end
  return out
end)
