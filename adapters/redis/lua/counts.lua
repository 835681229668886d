-- counts.lua: Counts returns the number of tasks in each state.
--
-- KEYS: KEYS[1..11] as in lib.lua.
-- ARGV: none
--
-- Returns:
--   {0, '', scheduled, ready, running, succeeded, failed, quarantined}   (decimal)
--   {8, key, detail}             CORRUPT
return run(function()
  local out = {OK, ''}
  for i = 6, 10 do
    out[#out + 1] = fmt(rcall(KEYS[i], 'ZCARD', KEYS[i]))
  end
  local q = qkey()
  out[#out + 1] = fmt(rcall(q, 'ZCARD', q))
  return out
end)
