-- enqueue_batch.lua: EnqueueBatch adds tasks in order, each by the rules of
-- Enqueue against what the items before it left, each answered on its own:
-- a refused item (an argument that does not parse, an ID taken, also by an
-- earlier item, a full queue) changes nothing and does not stop the others.
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks' keys are KEYS[11] .. ID);
-- KEYS[12] the memo key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] capacity: max pending tasks, 0 for unlimited
-- ARGV[3 + 6i .. 8 + 6i] item i: task ID, payload, priority, run_after
--         ('' for none), max_attempts, timeout (ns, '' for none)
--
-- Returns:
--   {0, now, item, item, ...}    per item its code, the number of strings
--                                that follow and then, for code 0, the task
--                                (ID, packed value), else the refusal's detail
--                                (1 INVALID_ARGUMENT, 5 EXISTS, 7 QUEUE_FULL)
--   {1, detail}                  INVALID_ARGUMENT: of the batch itself
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local capacity = int(ARGV[2])
  if not capacity or capacity < 0 then refuse(INVALID, 'capacity ' .. ARGV[2]) end
  local n = (#ARGV - 3) / 6
  if n < 0 or n ~= math.floor(n) then refuse(INVALID, 'batch of ' .. (#ARGV - 3) .. ' arguments') end
  local seq = load_seq()
  local m = recall_reply()
  if m then return m end
  -- Every check before the first write: each item's task as stored.
  local stored = load_items(3, 6, n, seq)
  local pending = 0
  if capacity > 0 then
    for _, i in ipairs({6, 7, 8}) do pending = pending + rcall(KEYS[i], 'ZCARD', KEYS[i]) end
  end

  local items, added = {}, {}
  local version = seq
  for i = 0, n - 1 do
    local id = ARGV[3 + 6 * i]
    local priority, run_after_s, max_attempts = int(ARGV[5 + 6 * i]), ARGV[6 + 6 * i], int(ARGV[7 + 6 * i])
    local timeout = ARGV[8 + 6 * i]
    local run_after = false
    if run_after_s ~= '' then run_after = int(run_after_s) end
    if not priority or priority < MIN_PRIORITY or priority > MAX_PRIORITY then
      items[i + 1] = {INVALID, 'priority ' .. ARGV[5 + 6 * i]}
    elseif not max_attempts or max_attempts < 1 then
      items[i + 1] = {INVALID, 'max_attempts ' .. ARGV[7 + 6 * i]}
    elseif not timeout_ok(timeout) then
      items[i + 1] = {INVALID, 'timeout ' .. timeout}
    elseif run_after == nil then
      items[i + 1] = {INVALID, 'run_after ' .. run_after_s}
    elseif stored[id] then
      items[i + 1] = {EXISTS}
    elseif capacity > 0 and pending >= capacity then
      items[i + 1] = {QUEUE_FULL, fmt(pending)}
    else
      version = version + 1
      local t = {key = KEYS[11] .. id, id = id, payload = ARGV[4 + 6 * i], priority = priority,
        attempt = 0, max_attempts = max_attempts, version = version,
        enqueued_at = now, errors = '', result = '', timeout = timeout}
      queue_at(t, now, run_after)
      stored[id] = t
      pending = pending + 1
      items[i + 1] = t
      added[#added + 1] = t
    end
  end
  reserve(seq, #added)

  store_all(added)
  local out = emit_items({OK, fmt(now)}, items, n)
  if #added > 0 then
    redis.call('SET', KEYS[1], fmt(version))
    remember_reply(out)
  end
  return out
end)
