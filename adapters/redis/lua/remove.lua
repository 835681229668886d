-- remove.lua: Remove deletes a task in any state and returns it as it was.
-- The sequence is not reset, so no token or version is ever reused. A
-- quarantined record, or one it cannot trust (see set_aside in lib.lua),
-- is deleted with every index entry of its ID when no version is expected
-- and returned as quarantined; an expected version is a VERSION_CONFLICT,
-- since it has none.
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
  local id, expect = ARGV[2], ARGV[3]
  local t, why = examine(KEYS[12], id, seq)
  if not t and not why then refuse(NOT_FOUND) end
  local version = '0'
  if t then version = fmt(t.version) end
  if expect ~= '0' and version ~= expect then refuse(VERSION_CONFLICT, version) end

  if t and t.state ~= 'quarantined' then
    local release = releases(t)
    unregister_first({id})
    unindex(t)
    if release then redis.call('HDEL', ukey(), t.unique_key) end
  else
    if not t then t = {id = id, packed = quarantine_record(why, false)} end
    writable_all()
    drop(id)
  end
  redis.call('DEL', KEYS[12])
  local task = emit({}, t)
  remember(task)
  return emit({OK, fmt(now)}, t)
end)
