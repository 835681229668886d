-- enqueue.lua: Enqueue adds a task, Scheduled if run_after is after now,
-- else Ready.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the new task's key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] task ID
-- ARGV[3] payload
-- ARGV[4] priority
-- ARGV[5] run_after: µs, or '' for none
-- ARGV[6] max_attempts
-- ARGV[7] capacity: max pending tasks, 0 for unlimited
-- ARGV[8] timeout: the attempt timeout in ns, or '' for none
-- ARGV[9] unique key, or '' for none
-- ARGV[10] its hold period in µs, or '' for while the task is pending
--
-- Returns:
--   {0, now, task}               the new task (ID, packed value)
--   {1, detail}                  INVALID_ARGUMENT: an argument does not parse
--   {5}                          EXISTS: a task has the ID (in any state), or
--                                a damaged record: a key that does not hold
--                                a task, an index entry without its task
--                                (a task this call added is answered as stored)
--   {10, holder, key}            DUPLICATE: the task holder holds the unique key
--   {7, pending}                 QUEUE_FULL: pending tasks reached capacity
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local id = ARGV[2]
  local priority, max_attempts, capacity = int(ARGV[4]), int(ARGV[6]), int(ARGV[7])
  local run_after = arg_time(ARGV[5], 'run_after')
  if not priority or priority < MIN_PRIORITY or priority > MAX_PRIORITY then refuse(INVALID, 'priority ' .. ARGV[4]) end
  if not max_attempts or max_attempts < 1 then refuse(INVALID, 'max_attempts ' .. ARGV[6]) end
  if not capacity or capacity < 0 then refuse(INVALID, 'capacity ' .. ARGV[7]) end
  if not timeout_ok(ARGV[8]) then refuse(INVALID, 'timeout ' .. tostring(ARGV[8])) end
  local key, period = ARGV[9], false
  if ARGV[10] ~= '' then
    period = int(ARGV[10])
    if not period or period < 0 or key == '' then refuse(INVALID, 'unique period ' .. tostring(ARGV[10])) end
  end
  local seq = load_seq()
  replay(id)
  -- A key that holds anything, a damaged record included, takes the ID.
  -- The write of the task checks that itself (see create); an EXISTS
  -- checks it first only when a refusal that comes after it may follow
  -- (a held unique key, a full queue, the sequence's end).
  if key ~= '' or capacity > 0 or seq + 1 >= VERSION_LIMIT then
    if redis.call('EXISTS', KEYS[12]) == 1 then refuse(EXISTS) end
  end
  if key ~= '' then
    local holder = key_holder(key, now)
    if holder then refuse(DUPLICATE, holder, key) end
  end
  -- So does an index entry without its task (Get shows it quarantined):
  -- the registry holds its ID. Checked before any write.
  local taken, complete = known(id)
  if taken then refuse(EXISTS) end
  local backlog
  if not complete then backlog = registry_backlog() end
  if capacity > 0 then
    local pending = 0
    for _, i in ipairs({6, 7, 8}) do pending = pending + rcall(KEYS[i], 'ZCARD', KEYS[i]) end
    if pending >= capacity then refuse(QUEUE_FULL, fmt(pending)) end
  end
  reserve(seq, 1)
  local t = {key = KEYS[12], id = id, payload = ARGV[3], priority = priority,
    attempt = 0, max_attempts = max_attempts, version = seq + 1,
    enqueued_at = now, errors = '', result = '', timeout = ARGV[8]}
  if key ~= '' then
    t.unique_key, t.unique_until = key, false
    if period then t.unique_until = now + period end
  end
  queue_at(t, now, run_after)

  create(t)
  register({id}, backlog)
  if key ~= '' then redis.call('HSET', ukey(), key, id) end
  redis.call('SET', KEYS[1], fmt(t.version))
  return answer(now, t)
end)
