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
--
-- Returns:
--   {0, now, task}               the new task (ID, packed value)
--   {1, detail}                  INVALID_ARGUMENT: an argument does not parse
--   {5}                          EXISTS: a task has the ID (in any state)
--                                (a task this call added is answered as stored)
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
  local seq = load_seq()
  replay(id)
  -- A key that holds anything, a damaged record included, takes the ID.
  -- The write of the task checks that itself (see create); an EXISTS
  -- checks it first only when a refusal that comes after it may follow
  -- (a full queue, the sequence's end).
  if capacity > 0 or seq + 1 >= VERSION_LIMIT then
    if redis.call('EXISTS', KEYS[12]) == 1 then refuse(EXISTS) end
  end
  if capacity > 0 then
    local pending = 0
    for _, i in ipairs({6, 7, 8}) do pending = pending + rcall(KEYS[i], 'ZCARD', KEYS[i]) end
    if pending >= capacity then refuse(QUEUE_FULL, fmt(pending)) end
  end
  reserve(seq, 1)
  local t = {key = KEYS[12], id = id, payload = ARGV[3], priority = priority,
    attempt = 0, max_attempts = max_attempts, version = seq + 1,
    enqueued_at = now, errors = '', result = '', timeout = ARGV[8]}
  queue_at(t, now, run_after)

  create(t)
  redis.call('SET', KEYS[1], fmt(t.version))
  return answer(now, t)
end)
