-- get.lua: Get returns one task. A record it cannot trust (see set_aside
-- in lib.lua) is returned as a quarantined record with the reason, and
-- nothing is written: only a scan sets it aside.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] task ID
--
-- Returns:
--   {0, '', task}                the task (a quarantined record included)
--   {3}                          NOT_FOUND
--   {8, key, detail}             CORRUPT: a queue-wide key is damaged
return run(function()
  local t, why = examine(KEYS[12], ARGV[1], load_seq())
  if t then return emit({OK, ''}, t) end
  if not why then refuse(NOT_FOUND) end
  return {OK, '', ARGV[1], quarantine_record(why, false)}
end)
