-- get.lua: Get returns one task.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] task ID
--
-- Returns:
--   {0, '', task}                the task
--   {3}                          NOT_FOUND
--   {8, key, detail}             CORRUPT
return run(function()
  local t = load_task(KEYS[12], ARGV[1], load_seq())
  if not t then refuse(NOT_FOUND) end
  check_indexed(t)
  return emit({OK, ''}, t)
end)
