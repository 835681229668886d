-- remove.lua: Remove deletes a task in any state and returns it as it was.
-- The sequence is not reset, so no token or version is ever reused.
--
-- KEYS: KEYS[1..11] as in lib.lua; KEYS[12] the task's key.
-- ARGV[1] now: µs, or '' for the server's TIME (only reported)
-- ARGV[2] task ID
-- ARGV[3] expected version (decimal), '0' for any
--
-- Returns:
--   {0, now, task}               the task as it was
--   {3}                          NOT_FOUND
--   {6, version}                 VERSION_CONFLICT: the task is at version
--   {8, key, detail}             CORRUPT
return run(function()
  local now = clock(ARGV[1])
  local seq = load_seq()
  local m = recall()
  if m then
    local out = {OK, fmt(now)}
    for _, f in ipairs(m) do out[#out + 1] = f end
    return out
  end
  local t = inspected(ARGV[2], ARGV[3], seq)
  check_indexed(t)

  unindex(t)
  redis.call('DEL', t.key)
  local task = emit({}, t)
  remember(task)
  return emit({OK, fmt(now)}, t)
end)
