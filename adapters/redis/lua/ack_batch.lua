-- ack_batch.lua: AckBatch records the success of claims in order, each by
-- the rules of Ack (the token, then the state) against what the items before
-- it left, each answered on its own: a refused item changes nothing and does
-- not stop the others (a claim named twice is acknowledged once; the second
-- item finds the task Succeeded). An item on a damaged record is CORRUPT
-- (8 key detail) and leaves the record as it is.
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks' keys are KEYS[11] .. ID);
-- KEYS[12] the memo key.
-- ARGV[1] now: µs, or '' for the server's TIME
-- ARGV[2 + 3i .. 4 + 3i] item i: task ID, claim token (decimal), result
--
-- Returns:
--   {0, now, item, item, ...}    per item its code, the number of strings
--                                that follow and then, for code 0, the task
--                                (ID, packed value), else the refusal's detail
--                                (2 STALE_CLAIM reason, 4 TRANSITION state,
--                                8 CORRUPT key detail)
--   {1, detail}                  INVALID_ARGUMENT: of the batch itself
--   {8, key, detail}             CORRUPT
--   {9, seq}                     SEQUENCE_EXHAUSTED
return run(function()
  local now = clock(ARGV[1])
  local n = (#ARGV - 2) / 3
  if n < 0 or n ~= math.floor(n) then refuse(INVALID, 'batch of ' .. (#ARGV - 2) .. ' arguments') end
  local seq = load_seq()
  local m = recall_reply()
  if m then return m end
  -- Every check before the first write: each item's task as stored, and
  -- the damaged records among them, whose items are CORRUPT.
  local tasks, damaged = ack_tasks(2, n, seq)

  local items, acked, version = ack_items(tasks, damaged, 2, n, seq, now)
  reserve(seq, #acked)

  store_all(acked)
  local out = emit_items({OK, fmt(now)}, items, n)
  if #acked > 0 then
    redis.call('SET', KEYS[1], fmt(version))
    remember_reply(out)
  end
  return out
end)
