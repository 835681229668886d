-- list.lua: List returns up to limit tasks in one state with an ID greater
-- than `after`, in ID (byte) order, and the cursor of the next page. It
-- only reads: a record it cannot trust (see set_aside in lib.lua) that is
-- still listed under a state is passed over; the quarantined records are
-- listed from the quarantine index.
--
-- KEYS: KEYS[1..11] as in lib.lua (the tasks are found in the state's ID
-- index; their keys are KEYS[11] .. ID).
-- ARGV[1] state
-- ARGV[2] after: '' for the first page
-- ARGV[3] limit: >= 1
--
-- Returns:
--   {0, next, task, task, ...}   next is '' on the last page
--   {1, detail}                  INVALID_ARGUMENT
--   {8, key, detail}             CORRUPT
return run(function()
  local state = ARGV[1]
  local k
  if state == 'quarantined' then
    k = qkey()
  elseif IDS[state] then
    k = KEYS[IDS[state]]
  else
    refuse(INVALID, 'state ' .. state)
  end
  local limit = int(ARGV[3])
  if not limit or limit < 1 then refuse(INVALID, 'limit ' .. ARGV[3]) end
  local from = '-'
  if ARGV[2] ~= '' then from = '(' .. ARGV[2] end
  local seq = load_seq()
  local out, n, last = {OK, ''}, 0, nil
  while true do
    local ids = rcall(k, 'ZRANGEBYLEX', k, from, '+', 'LIMIT', 0, limit + 1)
    for i = 1, #ids do
      local t = judge(ids[i], state, nil, seq, true)
      if t then
        if n == limit then
          out[2] = last
          return out
        end
        emit(out, t)
        n, last = n + 1, ids[i]
      end
    end
    if #ids <= limit then return out end
    from = '(' .. ids[#ids]
  end
end)
