-- enqueue_batch.lua: EnqueueBatch adds tasks in order, each by the rules of
-- Enqueue against what the items before it left, each answered on its own:
-- a refused item (an argument that does not parse, an ID taken, also by an
-- earlier item or by a damaged record, a full queue) changes nothing and
-- does not stop the others. As Enqueue, it does not read the records of
-- the IDs taken.
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks' keys are KEYS[11] .. ID);
-- KEYS[12] the memo key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] capacity: max pending tasks, 0 for unlimited
-- ARGV[3 + 8i .. 10 + 8i] item i: task ID, payload, priority, run_after
--         ('' for none), max_attempts, timeout (ns, '' for none), unique
--         key ('' for none), its hold period (µs, '' while pending)
--
-- Returns:
--   {0, now, item, item, ...}    per item its code, the number of strings
--                                that follow and then, for code 0, the task
--                                (ID, packed value), else the refusal's detail
--                                (1 INVALID_ARGUMENT, 5 EXISTS, 10 DUPLICATE
--                                with the holder and the key, 7 QUEUE_FULL)
--   {1, detail}                  INVALID_ARGUMENT: of the batch itself
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local capacity = int(ARGV[2])
  if not capacity or capacity < 0 then refuse(INVALID, 'capacity ' .. ARGV[2]) end
  local n = (#ARGV - 3) / 8
  if n < 0 or n ~= math.floor(n) then refuse(INVALID, 'batch of ' .. (#ARGV - 3) .. ' arguments') end
  local seq = load_seq()
  local m = recall_reply()
  if m then return m end
  -- Every check before the first write: which IDs are taken.
  local stored, backlog = taken_ids(3, 8, n)
  local pending = 0
  if capacity > 0 then
    for _, i in ipairs({6, 7, 8}) do pending = pending + rcall(KEYS[i], 'ZCARD', KEYS[i]) end
  end

  local items, added = {}, {}
  -- taken: the tasks of this batch that took a unique key, by key.
  local taken, keyed = {}, {}
  local version = seq
  for i = 0, n - 1 do
    local id = ARGV[3 + 8 * i]
    local priority, run_after_s, max_attempts = int(ARGV[5 + 8 * i]), ARGV[6 + 8 * i], int(ARGV[7 + 8 * i])
    local timeout, key, period_s = ARGV[8 + 8 * i], ARGV[9 + 8 * i], ARGV[10 + 8 * i]
    local run_after, period = false, false
    if run_after_s ~= '' then run_after = int(run_after_s) end
    if period_s ~= '' then period = int(period_s) end
    local holder
    if not priority or priority < MIN_PRIORITY or priority > MAX_PRIORITY then
      items[i + 1] = {INVALID, 'priority ' .. ARGV[5 + 8 * i]}
    elseif not max_attempts or max_attempts < 1 then
      items[i + 1] = {INVALID, 'max_attempts ' .. ARGV[7 + 8 * i]}
    elseif not timeout_ok(timeout) then
      items[i + 1] = {INVALID, 'timeout ' .. timeout}
    elseif run_after == nil then
      items[i + 1] = {INVALID, 'run_after ' .. run_after_s}
    elseif period == nil or (period and (period < 0 or key == '')) then
      items[i + 1] = {INVALID, 'unique period ' .. period_s}
    elseif stored[id] then
      items[i + 1] = {EXISTS}
    elseif key ~= '' then
      local mine = taken[key]
      if mine then
        if holds(mine.state, mine.unique_until, now) then holder = mine.id end
      else
        holder = key_holder(key, now)
      end
    end
    if items[i + 1] then
      -- refused above
    elseif holder then
      items[i + 1] = {DUPLICATE, holder, key}
    elseif capacity > 0 and pending >= capacity then
      items[i + 1] = {QUEUE_FULL, fmt(pending)}
    else
      version = version + 1
      local t = {key = KEYS[11] .. id, id = id, payload = ARGV[4 + 8 * i], priority = priority,
        attempt = 0, max_attempts = max_attempts, version = version,
        enqueued_at = now, errors = '', result = '', timeout = timeout}
      if key ~= '' then
        t.unique_key, t.unique_until = key, false
        if period then t.unique_until = now + period end
        taken[key] = t
        keyed[#keyed + 1] = key
        keyed[#keyed + 1] = id
      end
      queue_at(t, now, run_after)
      stored[id] = t
      pending = pending + 1
      items[i + 1] = t
      added[#added + 1] = t
    end
  end
  reserve(seq, #added)

  store_all(added)
  if #added > 0 then
    local ids = {}
    for _, t in ipairs(added) do ids[#ids + 1] = t.id end
    register(ids, backlog)
  end
  if #keyed > 0 then bulk('HSET', ukey(), keyed, 2) end
  local out = emit_items({OK, fmt(now)}, items, n)
  if #added > 0 then
    redis.call('SET', KEYS[1], fmt(version))
    remember_reply(out)
  end
  return out
end)
