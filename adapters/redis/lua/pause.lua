-- pause.lua: Pause and Resume set or clear the queue's paused flag, the
-- key P{q}:paused (a string '1' while paused). pop.lua reads it in the
-- same script that claims, so no Pop claims after a Pause returned.
-- Idempotent: a call sent again sets the flag to what it already is, so
-- the call keeps no memo.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the paused key.
-- ARGV[1] '1' to pause, '0' to resume
--
-- Returns:
--   {0, paused}                  paused: '1' or '0', the flag as the call left it
--   {1, detail}                  INVALID_ARGUMENT
return run(function()
  if ARGV[1] == '1' then
    redis.call('SET', KEYS[12], '1')
  elseif ARGV[1] == '0' then
    redis.call('DEL', KEYS[12])
  else
    refuse(INVALID, 'paused ' .. ARGV[1])
  end
  return {OK, ARGV[1]}
end)
