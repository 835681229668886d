-- list.lua: List returns up to limit tasks in one state with an ID greater
-- than `after`, in ID (byte) order, and the cursor of the next page.
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
  if not IDS[state] then refuse(INVALID, 'state ' .. state) end
  local limit = int(ARGV[3])
  if not limit or limit < 1 then refuse(INVALID, 'limit ' .. ARGV[3]) end
  local from = '-'
  if ARGV[2] ~= '' then from = '(' .. ARGV[2] end
  local seq = load_seq()
  local k = KEYS[IDS[state]]
  local ids = rcall(k, 'ZRANGEBYLEX', k, from, '+', 'LIMIT', 0, limit + 1)
  local out = {OK, ''}
  for i = 1, math.min(#ids, limit) do
    local t = load_task(KEYS[11] .. ids[i], ids[i], seq)
    if not t then refuse(CORRUPT, k, 'entry ' .. ids[i] .. ' without its task') end
    if t.state ~= state then bad(t, 'state ' .. t.state .. ' but listed as ' .. state) end
    emit(out, t)
  end
  if #ids > limit then out[2] = ids[limit] end
  return out
end)
