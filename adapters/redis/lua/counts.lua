-- counts.lua: Counts returns the number of tasks in each state and the
-- paused flag.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the paused key (see pause.lua).
-- ARGV: none
--
-- Returns:
--   {0, '', scheduled, ready, running, succeeded, failed, quarantined, paused}   (decimal; paused 1 or 0)
--   {8, key, detail}             CORRUPT
return run(function()
  local out = {OK, ''}
  for i = 6, 10 do
    out[#out + 1] = fmt(rcall(KEYS[i], 'ZCARD', KEYS[i]))
  end
  local q = qkey()
  out[#out + 1] = fmt(rcall(q, 'ZCARD', q))
  out[#out + 1] = fmt(redis.call('EXISTS', KEYS[12]))
  return out
end)
