-- ack_pop.lua: AckBatch with a pop. The claims are acknowledged in order,
-- each by the rules of Ack and answered on its own, exactly as ack_batch.lua
-- does; then, in the same call and at the same now, up to n Ready tasks are
-- claimed exactly as pop.lua claims them (setting aside the damaged records
-- it meets), from the queue the acks left: an acknowledged task is
-- Succeeded, so none of them is claimed, and the claims' tokens are drawn
-- after the acks' versions. The tasks the pop will
-- claim are read and checked with the items, before the first write (an
-- acknowledgement moves a task from running to finished and never touches
-- the ready index, so the acks do not change what the pop finds).
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks' keys are KEYS[11] .. ID);
-- KEYS[12] the paused key (see pause.lua: while it exists, the pop claims
-- nothing; the acks go on); KEYS[13] the memo key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2] lease: µs, > 0
-- ARGV[3] n: the pop's batch size, >= 1
-- ARGV[4 + 3i .. 6 + 3i] item i: task ID, claim token (decimal), result
--
-- Returns:
--   {0, now, item, ..., task, ...} per item (as ack_batch.lua) its code, the
--                                number of strings that follow and the task
--                                or the refusal's detail; then the claimed
--                                tasks (each: ID, packed value)
--   {1, detail}                  INVALID_ARGUMENT: of the batch itself
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local deadline = later(now, ARGV[2], 'lease')
  local k = int(ARGV[3])
  if not k or k < 1 then refuse(INVALID, 'batch ' .. ARGV[3]) end
  local n = (#ARGV - 4) / 3
  if n < 0 or n ~= math.floor(n) then refuse(INVALID, 'batch of ' .. (#ARGV - 4) .. ' arguments') end
  local seq = load_seq()
  local m = recall_reply()
  if m then return m end
  -- Every check before the first write: each item's task as stored, and
  -- the first k of the ready index with their tasks.
  local tasks, damaged = ack_tasks(4, n, seq)
  local first, aside = {}, {}
  if redis.call('EXISTS', KEYS[12]) == 0 then
    first, aside = sift('ready', function(offset, count)
      return rcall(KEYS[2], 'ZRANGE', KEYS[2], fmt(offset), fmt(offset + count - 1), 'WITHSCORES')
    end, k, seq)
  end

  local items, changed, version = ack_items(tasks, damaged, 4, n, seq, now)
  reserve(seq, #changed + #first)
  set_aside(aside)
  for _, t in ipairs(first) do
    version = version + 1
    t.was = t.state
    t.version = version
    t.state = 'running'
    t.token = version
    t.attempt = t.attempt + 1
    t.claimed_at = now
    t.deadline = deadline
    changed[#changed + 1] = t
  end

  store_all(changed)
  local out = emit_items({OK, fmt(now)}, items, n)
  for _, t in ipairs(first) do emit(out, t) end
  if #changed > 0 then
    redis.call('SET', KEYS[1], fmt(version))
    remember_reply(out)
  end
  return out
end)
