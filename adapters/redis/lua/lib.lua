-- lib.lua: the part every leasehold script shares. The store prepends to
-- each script (enqueue.lua, pop.lua, ...) the top-level definitions of this
-- file that the script uses, directly or through each other, so a script is
-- one self-contained EVAL body. Each definition starts on a line beginning
-- with "local "; comments stand on lines of their own.
--
-- KEYS, the same for every script (all carry the queue's {queue} hash tag,
-- so they live in one Redis Cluster slot):
--   KEYS[1]  seq            string: the last value drawn from the sequence
--   KEYS[2]  ready          zset: ID by (32767 - priority) * 2^36 + version
--   KEYS[3]  scheduled      zset: ID by run_after (µs)
--   KEYS[4]  running        zset: ID by deadline (µs)
--   KEYS[5]  finished       zset: ID by finished_at (µs)
--   KEYS[6]  ids:scheduled  zset: ID, score 0 (List in ID order)
--   KEYS[7]  ids:ready      zset: ID, score 0
--   KEYS[8]  ids:running    zset: ID, score 0
--   KEYS[9]  ids:succeeded  zset: ID, score 0
--   KEYS[10] ids:failed     zset: ID, score 0
--   KEYS[11] the task key prefix; a task's key is KEYS[11] .. ID. It is
--            not a key itself: it is declared so that the slot of the task
--            keys a script finds in an index is a declared slot.
--   KEYS[12] the task's key, for the scripts that act on one named task
--   KEYS[#KEYS] the memo key of the call (P{q}:req:<request ID>), last, for
--            the scripts that remember their answer (see recall)
--
-- ARGV: each script's own, then, last, the call's request ID ('' for the
-- reads): unique per call, and the same when the client sends the call again.
--
-- Return codes (the first element of every reply; the Go side maps them to
-- errors in one place, codeError):
--   0 OK                 {0, now, ...}
--   1 INVALID_ARGUMENT   {1, detail}
--   2 STALE_CLAIM        {2, reason}           reason: missing | token | version
--   3 NOT_FOUND          {3}
--   4 TRANSITION         {4, state}
--   5 EXISTS             {5}                   Enqueue: the ID is taken
--   6 VERSION_CONFLICT   {6, version}          the task is at another version
--   7 QUEUE_FULL         {7, pending}
--   8 CORRUPT            {8, key, detail}
--   9 SEQUENCE_EXHAUSTED {9, seq}
--  10 DUPLICATE          {10, holder, key}     Enqueue: another task holds the unique key
--
-- Every script validates everything (arguments, key types, each stored field
-- it reads, index entries against their task) before its first write and
-- refuses with a code; a refusal therefore never follows a write (the first
-- write, a ZADD, checks its own key's type: failing, it wrote nothing; the
-- second, a ZADD too, takes the first one's entry out again when it fails;
-- see move; Enqueue's first write, a SET NX of the new task's key, checks
-- that the ID is free, and the ZADDs after it take it back when they
-- fail, see create). Lua errors do not roll back, so this order is what makes a
-- refused call change nothing.

local OK, INVALID, STALE, NOT_FOUND, TRANSITION, EXISTS, VERSION_CONFLICT,
  QUEUE_FULL, CORRUPT, EXHAUSTED, DUPLICATE = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10

-- Largest integer a Lua number (a double) holds exactly.
local MAX_SAFE = 9007199254740991
-- Versions stay below 2^36 so the ready score (priority, version) is exact.
local VERSION_LIMIT = 68719476736
local MAX_PRIORITY, MIN_PRIORITY = 32767, -32768

-- A task is stored as one string, its packed value: its fields as
-- MessagePack values (cmsgpack), one after the other, in this order.
-- payload, state, errors and result are strings, the other fields integers
-- (times in µs), the times other than enqueued_at false when unset:
--   payload, priority, state, attempt, max_attempts, version, token,
--   enqueued_at, run_after, claimed_at, deadline, finished_at, errors,
--   result, timeout
-- timeout is the attempt timeout in nanoseconds as a decimal string ('' for
-- none; a string, as a double would round it). A record of the 14 fields
-- before it reads as timeout ''. A task with a unique key has two fields
-- more: unique_key (a string, never '') and unique_until (µs, false while
-- pending); a task without one has none, so it costs nothing.
--
-- Records written by earlier versions of the store hold the same fields as one
-- MessagePack array; they read the same (parse_task) and are written back
-- in the form above. The values one after the other unpack as that many
-- Lua values, with no table to build and collect: a table costs the
-- server several times what the values in it do. A record of either form
-- starts with a different byte (an array's header, or the payload's string
-- header), so the two never read as each other.

-- The order index and the ID index of each state (indexes into KEYS).
local ORDER = {scheduled = 3, ready = 2, running = 4, succeeded = 5, failed = 5}
local IDS = {scheduled = 6, ready = 7, running = 8, succeeded = 9, failed = 10}

-- refuse aborts the script with a return code; run turns it into the reply.
-- Retransmissions. A client whose connection dropped after the server ran a
-- call may send it again, with the same request ID. Every call that writes
-- keeps its whole reply (the clock reading and the tasks as it left them)
-- under its memo key for CALL.ttl seconds (answer, remember_reply,
-- remember), and a call that finds its memo key answers with what it holds
-- and writes nothing (replay, recall_reply, recall), whatever other calls
-- did to its tasks since. A refused call changed nothing and keeps no memo:
-- sent again, it is judged again. The request ID starts with the seconds
-- to keep the reply and '~': the store reckons them from its client's
-- retry limits and the call's deadline, the longest a resend can come
-- after the server ran the call (resend.go). An ID without them keeps the
-- reply MEMO_TTL seconds.
local MEMO_TTL = '30'
-- CALL is the running call: its request ID, the seconds its reply is kept,
-- the now its clock read, and zsets: the keys this call has already found
-- to hold a zset or nothing (a Z command on them succeeded, or TYPE said
-- so), which a write to them need not check again (see writable). A key's
-- type cannot change within a call but for its own writes, and the scripts
-- write only zsets there.
local CALL = {req = '', ttl = MEMO_TTL, now = 0, zsets = {}}

local function refuse(code, ...)
  error({leasehold = {code, ...}}, 0)
end

local function run(main)
  CALL.req = ARGV[#ARGV] or ''
  CALL.ttl = string.match(CALL.req, '^([1-9]%d?%d?%d?%d?)~') or MEMO_TTL
  CALL.now = 0
  CALL.zsets = {}
  local ok, res = pcall(main)
  if ok then return res end
  if type(res) == 'table' and res.leasehold then return res.leasehold end
  error(res, 0)
end

local function fmt(n) return string.format('%d', n) end

-- int parses a canonical decimal integer (no sign on 0, no leading zeros)
-- whose magnitude a double holds exactly; nil otherwise.
local function int(s)
  if type(s) ~= 'string' or #s > 17 then return nil end
  if s ~= '0' and not string.find(s, '^%-?[1-9]%d*$') then return nil end
  local n = tonumber(s)
  if n > MAX_SAFE or n < -MAX_SAFE then return nil end
  return n
end

-- ZREADS are the sorted-set reads the scripts make through rcall: one that
-- succeeds on key shows it a zset or nothing (CALL.zsets). A table lookup,
-- not string.byte: a call of a C function costs the server more.
local ZREADS = {ZSCORE = true, ZRANK = true, ZRANGE = true, ZRANGEBYSCORE = true,
  ZRANGEBYLEX = true, ZCARD = true, ZMSCORE = true}

-- rcall runs redis.pcall, refusing with CORRUPT on an error reply
-- (WRONGTYPE); see ZREADS.
local function rcall(key, cmd, ...)
  local r = redis.pcall(cmd, ...)
  if type(r) == 'table' and r.err then refuse(CORRUPT, key, r.err) end
  if ZREADS[cmd] then CALL.zsets[key] = true end
  return r
end

-- zset_ok refuses unless key holds a zset or nothing: a TYPE read unless
-- the call already knows (CALL.zsets).
local function zset_ok(key)
  if CALL.zsets[key] then return end
  local ty = redis.call('TYPE', key).ok
  if ty ~= 'zset' and ty ~= 'none' then refuse(CORRUPT, key, 'holds a ' .. ty .. ', not a zset') end
  CALL.zsets[key] = true
end

-- writable refuses unless each KEYS index names a zset or nothing.
local function writable(...)
  for _, i in ipairs({...}) do zset_ok(KEYS[i]) end
end

-- clock returns now in µs: ARGV's injected time, or the server's TIME.
local function clock(arg)
  local n
  if arg ~= '' then
    n = int(arg)
    if not n then refuse(INVALID, 'now ' .. arg) end
  else
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  CALL.now = n
  return n
end

-- later returns now + d (µs), refusing when it leaves the exact range.
local function later(now, d, what)
  local n = int(d)
  if not n or n < 0 then refuse(INVALID, what .. ' ' .. tostring(d)) end
  local t = now + n
  if t > MAX_SAFE then refuse(INVALID, what .. ' ' .. d .. ' reaches past the time range') end
  return t
end

-- arg_time parses a time argument: '' (unset) gives false.
-- MAX_TIMEOUT is model.MaxDuration in nanoseconds, as a decimal string.
local MAX_TIMEOUT = '3153600000000000000'

-- timeout_ok says whether s is a stored or given attempt timeout: '' (none)
-- or a decimal number of nanoseconds, 1..MAX_TIMEOUT, without leading zeros.
local function timeout_ok(s)
  return s == '' or (type(s) == 'string' and string.find(s, '^[1-9]%d*$') ~= nil and
    (#s < #MAX_TIMEOUT or (#s == #MAX_TIMEOUT and s <= MAX_TIMEOUT)))
end

local function arg_time(s, what)
  if s == '' then return false end
  local n = int(s)
  if not n then refuse(INVALID, what .. ' ' .. s) end
  return n
end

local function load_seq()
  local v = rcall(KEYS[1], 'GET', KEYS[1])
  if not v then return 0 end
  local n = int(v)
  if not n or n < 0 or n >= VERSION_LIMIT then refuse(CORRUPT, KEYS[1], 'sequence value ' .. v) end
  return n
end

-- reserve refuses unless k more versions stay below VERSION_LIMIT.
local function reserve(seq, k)
  if seq + k >= VERSION_LIMIT then refuse(EXHAUSTED, fmt(seq)) end
end

-- parse_errors checks the error history: entries
-- "<attempt> <at> <flag> <length>:<message>" back to back, flag 0 for a
-- handler's failure, 1 for a lease expiry, 2 for an operator's Cancel.
local function parse_errors(s)
  local pos, n = 1, #s
  while pos <= n do
    local a, at, _, len, nxt = string.match(s, '^(%d+) (%-?%d+) ([012]) (%d+):()', pos)
    if not a or not int(a) or not int(at) or not int(len) then return false end
    pos = nxt + tonumber(len)
    if pos > n + 1 then return false end
  end
  return true
end

local function bad(t, detail) refuse(CORRUPT, t.key, detail) end

-- whole reports whether n is an integer a double holds exactly.
local function whole(n)
  return type(n) == 'number' and n % 1 == 0 and n <= MAX_SAFE and n >= -MAX_SAFE
end

-- bad_field refuses a task whose field f holds n.
local function bad_field(key, f, n) refuse(CORRUPT, key, 'field ' .. f .. ' = ' .. tostring(n)) end

-- counted returns the number of its arguments, then them.
local function counted(...) return select('#', ...), ... end

-- unpack_counted unpacks the MessagePack values of v: their number, then
-- them (a record of the array form is one value, a table).
local function unpack_counted(v) return counted(cmsgpack.unpack(v)) end

-- record_fields returns the fields of a packed record as a list, in either
-- form (see above), or nil when it does not unpack: for the paths that
-- read a field or two of a record they do not parse.
local function record_fields(v)
  local r = {pcall(unpack_counted, v)} -- ok, n, then the n values
  if not r[1] or r[2] == 0 then return nil end
  if r[2] == 1 and type(r[3]) == 'table' then return r[3] end
  return {unpack(r, 3, r[2] + 2)}
end

-- parse_task checks the packed value v of the task at key and returns a
-- table of its fields (and packed: v). Anything that does not parse, or
-- breaks a rule every task keeps, refuses with CORRUPT. This runs for every
-- task every operation reads, so it checks each field once, as a local,
-- with no function call but type (a call costs a Lua function several
-- times what its comparisons do), and builds the table once, at the end.
local function parse_task(key, id, v, seq)
  local ok, n, payload, priority, state, attempt, max_attempts, version, token, enqueued_at,
    run_after, claimed_at, deadline, finished_at, errors, result, timeout, unique_key, unique_until =
    pcall(unpack_counted, v)
  if not ok or n == 0 then refuse(CORRUPT, key, 'not a packed task') end
  if type(payload) == 'table' then
    -- The array form (see above), a quarantine record included.
    if n ~= 1 then refuse(CORRUPT, key, 'not a packed task') end
    local a = payload
    n = #a
    if n == 3 and a[1] == 'quarantined' and type(a[2]) == 'string' then
      return {key = key, id = id, packed = v, state = 'quarantined', reason = a[2], version = 0, token = 0}
    end
    payload, priority, state, attempt, max_attempts, version, token, enqueued_at,
      run_after, claimed_at, deadline, finished_at, errors, result, timeout, unique_key, unique_until =
      a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17]
  end
  if n ~= 15 and n ~= 14 and n ~= 17 then refuse(CORRUPT, key, 'not a packed task') end
  if n == 17 then
    if type(unique_key) ~= 'string' or unique_key == '' then bad_field(key, 'unique_key', unique_key) end
    if not (unique_until == false or type(unique_until) == 'number' and unique_until % 1 == 0 and
      unique_until <= MAX_SAFE and unique_until >= -MAX_SAFE) then
      bad_field(key, 'unique_until', unique_until)
    end
  else
    unique_key, unique_until = nil, false
  end
  if timeout == nil then
    timeout = ''
  elseif timeout ~= '' and not timeout_ok(timeout) then
    bad_field(key, 'timeout', timeout)
  end
  if type(payload) ~= 'string' or type(state) ~= 'string' or type(errors) ~= 'string' or
    type(result) ~= 'string' then
    refuse(CORRUPT, key, 'a field of the task is not a string')
  end
  if not ORDER[state] then refuse(CORRUPT, key, 'field state = ' .. state) end
  -- Each integer field: a number, whole, within ±MAX_SAFE, and its own
  -- range (whole, inlined).
  if not (type(priority) == 'number' and priority % 1 == 0 and priority >= MIN_PRIORITY and
    priority <= MAX_PRIORITY) then
    bad_field(key, 'priority', priority)
  end
  if not (type(attempt) == 'number' and attempt % 1 == 0 and attempt >= 0 and attempt <= MAX_SAFE) then
    bad_field(key, 'attempt', attempt)
  end
  if not (type(max_attempts) == 'number' and max_attempts % 1 == 0 and max_attempts >= 1 and
    max_attempts <= MAX_SAFE) then
    bad_field(key, 'max_attempts', max_attempts)
  end
  if not (type(version) == 'number' and version % 1 == 0 and version >= 1 and version <= MAX_SAFE) then
    bad_field(key, 'version', version)
  end
  -- A version the sequence has not reached is the sequence's damage (it
  -- went back, and would hand out a version again), not the task's.
  if version > seq then refuse(CORRUPT, KEYS[1], 'sequence ' .. fmt(seq) .. ' behind task ' .. id .. ' at version ' .. fmt(version)) end
  if not (type(token) == 'number' and token % 1 == 0 and token >= 0 and token <= version) then
    bad_field(key, 'token', token)
  end
  -- The times: false (unset) or a whole number within ±MAX_SAFE.
  if enqueued_at ~= false and not (type(enqueued_at) == 'number' and enqueued_at % 1 == 0 and
    enqueued_at <= MAX_SAFE and enqueued_at >= -MAX_SAFE) then
    bad_field(key, 'enqueued_at', enqueued_at)
  end
  if run_after ~= false and not (type(run_after) == 'number' and run_after % 1 == 0 and
    run_after <= MAX_SAFE and run_after >= -MAX_SAFE) then
    bad_field(key, 'run_after', run_after)
  end
  if claimed_at ~= false and not (type(claimed_at) == 'number' and claimed_at % 1 == 0 and
    claimed_at <= MAX_SAFE and claimed_at >= -MAX_SAFE) then
    bad_field(key, 'claimed_at', claimed_at)
  end
  if deadline ~= false and not (type(deadline) == 'number' and deadline % 1 == 0 and
    deadline <= MAX_SAFE and deadline >= -MAX_SAFE) then
    bad_field(key, 'deadline', deadline)
  end
  if finished_at ~= false and not (type(finished_at) == 'number' and finished_at % 1 == 0 and
    finished_at <= MAX_SAFE and finished_at >= -MAX_SAFE) then
    bad_field(key, 'finished_at', finished_at)
  end
  if not enqueued_at then refuse(CORRUPT, key, 'no enqueued_at') end
  if errors ~= '' and not parse_errors(errors) then refuse(CORRUPT, key, 'field errors does not parse') end
  if state == 'running' then
    if token == 0 or not claimed_at or not deadline or attempt < 1 or finished_at then
      refuse(CORRUPT, key, 'running task without its claim')
    end
  elseif state == 'ready' or state == 'scheduled' then
    if token ~= 0 or claimed_at or deadline or finished_at then refuse(CORRUPT, key, state .. ' task holding a claim') end
    if state == 'scheduled' and not run_after then refuse(CORRUPT, key, 'scheduled task without run_after') end
  elseif not finished_at or deadline then
    refuse(CORRUPT, key, state .. ' task without finished_at')
  end
  return {key = key, id = id, packed = v, payload = payload, priority = priority,
    state = state, attempt = attempt, max_attempts = max_attempts, version = version,
    token = token, enqueued_at = enqueued_at, run_after = run_after, claimed_at = claimed_at,
    deadline = deadline, finished_at = finished_at, errors = errors, result = result,
    timeout = timeout, unique_key = unique_key, unique_until = unique_until}
end

-- load_task reads the task at key (one GET) and checks it: nil when there
-- is none; a key of another type refuses with CORRUPT.
local function load_task(key, id, seq)
  local v = rcall(key, 'GET', key)
  if not v then return nil end
  return parse_task(key, id, v, seq)
end

-- bulk runs cmd on key (nil: none) with the arguments of list, in as few
-- calls as the Lua stack allows, each carrying whole groups of stride.
-- first: the first call is the call's first write and checks key itself:
-- an error reply (a key of another type) refuses with CORRUPT, nothing
-- written.
local function bulk(cmd, key, list, stride, first)
  local per = 1000 * stride
  if #list <= per then
    if first then
      local r
      if key then r = redis.pcall(cmd, key, unpack(list)) else r = redis.pcall(cmd, unpack(list)) end
      if type(r) == 'table' and r.err then refuse(CORRUPT, key, r.err) end
    elseif key then
      redis.call(cmd, key, unpack(list))
    else
      redis.call(cmd, unpack(list))
    end
    return
  end
  for i = 1, #list, per do
    local args = {cmd}
    if key then args[2] = key end
    for j = i, math.min(i + per - 1, #list) do args[#args + 1] = list[j] end
    if first and i == 1 then
      local r = redis.pcall(unpack(args))
      if type(r) == 'table' and r.err then refuse(CORRUPT, key, r.err) end
    else
      redis.call(unpack(args))
    end
  end
end

-- load_tasks reads the tasks of ids (their keys KEYS[11] .. id) with MGET
-- and checks each as load_task does: a list in the order of ids, false
-- where there is none. MGET answers nothing for a key of another type, so
-- when some are missing one EXISTS makes sure none of those keys exists.
local function load_tasks(ids, seq)
  if #ids == 1 then return {load_task(KEYS[11] .. ids[1], ids[1], seq) or false} end
  local out, keys, missing = {}, {}, {}
  for i = 1, #ids do keys[i] = KEYS[11] .. ids[i] end
  for i = 1, #ids, 1000 do
    local r = redis.call('MGET', unpack(keys, i, math.min(i + 999, #ids)))
    for j = 1, #r do
      local k = i + j - 1
      if r[j] then
        out[k] = parse_task(keys[k], ids[k], r[j], seq)
      else
        out[k] = false
        missing[#missing + 1] = keys[k]
      end
    end
  end
  for i = 1, #missing, 1000 do
    if redis.call('EXISTS', unpack(missing, i, math.min(i + 999, #missing))) > 0 then
      refuse(CORRUPT, KEYS[11], 'a task key holds something other than a task')
    end
  end
  return out
end

-- load_items reads the tasks the n items of a batch name, each once (the
-- ID of item i, from 0, is ARGV[first + stride * i]): a map from ID to the
-- task as stored (false where there is none), and the IDs in the order
-- first named.
local function load_items(first, stride, n, seq)
  local by, ids = {}, {}
  for i = 0, n - 1 do
    local id = ARGV[first + stride * i]
    if by[id] == nil then
      by[id] = false
      ids[#ids + 1] = id
    end
  end
  for i, t in ipairs(load_tasks(ids, seq)) do by[ids[i]] = t end
  return by, ids
end

-- score is the task's score in the order index of its state.
local function score(t)
  local st = t.state
  if st == 'ready' then return (MAX_PRIORITY - t.priority) * VERSION_LIMIT + t.version end
  if st == 'scheduled' then return t.run_after end
  if st == 'running' then return t.deadline end
  return t.finished_at
end

-- check_indexed refuses unless the task is in both indexes of its state,
-- in the order index at its score (got: the score already read, if any).
-- A quarantined record is in no order index (see set_aside).
local function check_indexed(t, got)
  if t.state == 'quarantined' then return end
  local ok = KEYS[ORDER[t.state]]
  if got == nil then got = rcall(ok, 'ZSCORE', ok, t.id) end
  if not got or tonumber(got) ~= score(t) then
    bad(t, 'not in ' .. ok .. ' at its score (found ' .. tostring(got) .. ')')
  end
  local ik = KEYS[IDS[t.state]]
  if not rcall(ik, 'ZRANK', ik, t.id) then bad(t, 'not in ' .. ik) end
end

-- scores returns the scores of ids in the index KEYS[k] (false where
-- absent), with ZMSCORE, or one ZSCORE each on a server without it.
local function scores(k, ids)
  local key, out = KEYS[k], {}
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    local r = redis.pcall('ZMSCORE', key, unpack(ids, i, j))
    if type(r) == 'table' and r.err then
      if string.find(r.err, 'WRONGTYPE', 1, true) then refuse(CORRUPT, key, r.err) end
      r = {}
      for x = i, j do r[#r + 1] = rcall(key, 'ZSCORE', key, ids[x]) end
    else
      CALL.zsets[key] = true
    end
    if j == #ids and i == 1 then return r end -- one call: its reply, not a copy
    for x = 1, #r do out[i + x - 1] = r[x] end
  end
  return out
end

-- check_all checks tasks as check_indexed does, with one ZMSCORE per index
-- for all of them instead of a ZSCORE per task (got[i]: the order score of
-- ts[i] already read, if any).
local function check_all(ts, got)
  local n = #ts
  if n == 1 then return check_indexed(ts[1], got and got[1]) end
  if n == 0 then return end
  -- The common case, every task in one state and every order score read
  -- or none (a batch's claims, a scan's tasks): the two indexes' scores
  -- read straight into the checks, without grouping the tasks by index.
  local st = ts[1].state
  local o = ORDER[st]
  local uniform = o ~= nil
  for i = 1, n do
    if not uniform then break end
    uniform = ts[i].state == st and (got == nil or got[i] ~= nil)
  end
  if uniform then
    local ids = {}
    for i = 1, n do ids[i] = ts[i].id end
    local r = got or scores(o, ids)
    for i = 1, n do
      local g = r[i]
      if not g or tonumber(g) ~= score(ts[i]) then
        bad(ts[i], 'not in ' .. KEYS[o] .. ' at its score (found ' .. tostring(g) .. ')')
      end
    end
    local k = IDS[st]
    r = scores(k, ids)
    for i = 1, n do
      if not r[i] then bad(ts[i], 'not in ' .. KEYS[k]) end
    end
    return
  end
  local by = {}
  for i = 1, #ts do
    local t = ts[i]
    local o = ORDER[t.state]
    if o then
      local g = got and got[i]
      if g ~= nil then
        if not g or tonumber(g) ~= score(t) then
          bad(t, 'not in ' .. KEYS[o] .. ' at its score (found ' .. tostring(g) .. ')')
        end
      else
        local l = by[o]
        if l then
          l.ids[#l.ids + 1] = t.id
          l.ts[#l.ts + 1] = t
        else
          by[o] = {ids = {t.id}, ts = {t}}
        end
      end
      local k = IDS[t.state]
      local l = by[k]
      if l then
        l.ids[#l.ids + 1] = t.id
        l.ts[#l.ts + 1] = t
      else
        by[k] = {ids = {t.id}, ts = {t}}
      end
    end
  end
  for k, l in pairs(by) do
    local r = scores(k, l.ids)
    for x, t in ipairs(l.ts) do
      if k == IDS[t.state] then
        if not r[x] then bad(t, 'not in ' .. KEYS[k]) end
      elseif not r[x] or tonumber(r[x]) ~= score(t) then
        bad(t, 'not in ' .. KEYS[k] .. ' at its score (found ' .. tostring(r[x]) .. ')')
      end
    end
  end
end

-- must_tasks loads the tasks of index entries (r: ID, score, ID, score...
-- of the order index of state): a missing one is CORRUPT, and so is one in
-- another state than the index, or at another score.
local function must_tasks(r, state, seq)
  local ids, got = {}, {}
  for i = 1, #r, 2 do
    ids[#ids + 1] = r[i]
    got[#got + 1] = r[i + 1]
  end
  local ts = load_tasks(ids, seq)
  for i, t in ipairs(ts) do
    if not t then refuse(CORRUPT, KEYS[ORDER[state]], 'entry ' .. ids[i] .. ' without its task') end
    if t.state ~= state then bad(t, 'state ' .. t.state .. ' but listed as ' .. state) end
  end
  check_all(ts, got)
  return ts
end
-- Damaged records (see "Damaged records" in the model's documentation). A
-- record a scan cannot trust (a task key that does not hold a packed task,
-- an index entry whose task is gone, or a task that disagrees with the
-- index that lists it) is set aside in the same call: out of every index,
-- into the quarantine index, its key holding the quarantine record
-- {'quarantined', reason, the value it held ('' if none)}, which
-- parse_task reads as a task in state 'quarantined' with version and
-- token 0. Damage to a queue-wide key (the sequence, an index of the wrong
-- type) still refuses the call.

-- qkey is the quarantine index: zset of IDs, score 0. It shares the queue's
-- slot and is reached as the task keys are (not declared itself).
local function qkey() return string.sub(KEYS[1], 1, -4) .. 'ids:quarantined' end

-- ukey is the unique-key index: hash of unique key -> ID of its last
-- taker (model.Queue.KeyHolder). It shares the queue's slot and is reached
-- as the task keys are (not declared itself). Only a task with a unique
-- key reads or writes it.
local function ukey() return string.sub(KEYS[1], 1, -4) .. 'unique' end

-- akey is the registry: a set of every ID the queue holds a record of (a
-- task, or a record set aside), with the member '' that marks it complete.
-- Enqueue and EnqueueBatch add an ID with its task, Remove and Prune take
-- it out when they delete the record, and no transition touches it, so
-- one SMISMEMBER tells Enqueue whether an ID is taken, an index entry left
-- without its task included (the ID stays registered). A queue written
-- before the registry has none (or one without ''): there the scripts read
-- the indexes for an ID, as before, and the next Enqueue builds it. It
-- shares the queue's slot and is reached as the task keys are.
local function akey() return string.sub(KEYS[1], 1, -4) .. 'all' end

-- holds reports whether a hold of a unique key lasts at now (Task.HoldsKey):
-- until unique_until when the task has a period, else while it is pending.
local function holds(state, unique_until, now)
  if unique_until then return now < unique_until end
  return state == 'scheduled' or state == 'ready' or state == 'running'
end

-- key_holder returns the ID of the task that holds the unique key at now,
-- or nil: the key's last taker, if it still exists, is not set aside,
-- still carries the key and its hold lasts. Only the fields the hold
-- depends on are read (as the SQL stores read those columns only): a
-- record whose other fields are damaged holds its key until it is set
-- aside.
local function key_holder(key, now)
  local uk = ukey()
  local id = rcall(uk, 'HGET', uk, key)
  if not id then return nil end
  local v = redis.pcall('GET', KEYS[11] .. id)
  if type(v) ~= 'string' then return nil end
  local a = record_fields(v)
  if not a or #a ~= 17 or a[16] ~= key or not ORDER[a[3]] then return nil end
  if a[17] ~= false and not whole(a[17]) then return nil end
  if holds(a[3], a[17], now) then return id end
  return nil
end

-- releases reports whether deleting task t must drop its entry from the
-- unique-key index (t is its key's last taker); read before the call's
-- first write, so the HDEL after it cannot fail.
local function releases(t)
  if not t.unique_key then return false end
  local uk = ukey()
  return rcall(uk, 'HGET', uk, t.unique_key) == t.id
end

-- quarantine_record is the packed quarantine record of a damaged value.
local function quarantine_record(reason, was)
  if type(was) ~= 'string' then was = '' end
  return cmsgpack.pack({'quarantined', reason, was})
end

-- corrupt_detail returns the detail of a CORRUPT refusal caught by pcall
-- when it names key (a record's own damage), else nil.
local function corrupt_detail(e, key)
  if type(e) == 'table' and e.leasehold and e.leasehold[1] == CORRUPT and e.leasehold[2] == key then
    return e.leasehold[3]
  end
  return nil
end

-- judge reads the record of index entry id (got: its score in the order
-- index of state, nil when not read from one) without refusing for its
-- own damage: the task, or nil, why it cannot be trusted, the value its
-- key held and whether only the entry is stray (a sound task, indexed as
-- its state says, also listed in the index of another state: the entry
-- is dropped, the task left as it is). A key of another type than a
-- string is a damaged record; damage to an index key still refuses.
-- state 'finished' stands for succeeded and failed. unindexed: leave out
-- the check of the task's index entries (List, which found it in one).
local function judge(id, state, got, seq, unindexed)
  local key = KEYS[11] .. id
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    return nil, 'task key holds a ' .. redis.call('TYPE', key).ok .. ', not a packed task', false
  end
  if not v then return nil, 'index entry without its task', false end
  local ok, t = pcall(parse_task, key, id, v, seq)
  if not ok then
    local why = corrupt_detail(t, key)
    if not why then error(t, 0) end
    return nil, why, v
  end
  local listed = t.state == state or state == 'finished' and (t.state == 'succeeded' or t.state == 'failed')
  if state and not listed then
    if t.state ~= 'quarantined' and not unindexed and pcall(check_indexed, t) then return nil, 'stray', v, true end
    return nil, 'state ' .. t.state .. ' but listed as ' .. state, v
  end
  if unindexed then return t end
  local ok2, e = pcall(check_indexed, t, got)
  if not ok2 then
    local why = corrupt_detail(e, key)
    if not why then error(e, 0) end
    return nil, why, v
  end
  return t
end

-- sift returns the tasks of the order index of state that fetch(offset,
-- count) lists (ID, score, ...; count 0: all), in index order, at most
-- limit (0: all), and the damaged records met on the way ({id, key,
-- reason, was}), which do not count. The common case, nothing damaged,
-- reads as must_tasks does; only when that meets a damaged record are the
-- entries judged one by one.
local function sift(state, fetch, limit, seq)
  local r = fetch(0, limit)
  local ok, ts = pcall(must_tasks, r, state, seq)
  if ok then return ts, {} end
  if not (type(ts) == 'table' and ts.leasehold and ts.leasehold[1] == CORRUPT) then error(ts, 0) end
  local sound, aside, offset = {}, {}, 0
  while true do
    for i = 1, #r, 2 do
      if limit > 0 and #sound == limit then break end
      local t, why, was, stray = judge(r[i], state, r[i + 1], seq)
      if t then
        sound[#sound + 1] = t
      else
        aside[#aside + 1] = {id = r[i], key = KEYS[11] .. r[i], reason = why, was = was, stray = ORDER[state]}
        if not stray then aside[#aside].stray = nil end
      end
    end
    if limit == 0 or #sound == limit or #r < 2 * limit then break end
    offset = offset + #r / 2
    r = fetch(offset, limit)
  end
  return sound, aside
end

-- scan returns the tasks of an order index with a score up to max (a
-- Redis score bound), in index order, at most limit (0: all), and the
-- damaged records met on the way (see sift).
local function scan(state, max, limit, seq)
  local k = KEYS[ORDER[state]]
  return sift(state, function(offset, count)
    if count > 0 then
      return rcall(k, 'ZRANGEBYSCORE', k, '-inf', max, 'WITHSCORES', 'LIMIT', fmt(offset), fmt(count))
    end
    return rcall(k, 'ZRANGEBYSCORE', k, '-inf', max, 'WITHSCORES')
  end, limit, seq)
end

-- writable_all refuses unless every index, the quarantine index included,
-- is a zset or nothing: checked before a call's first write when it sets
-- records aside or deletes damaged ones.
local function writable_all()
  writable(2, 3, 4, 5, 6, 7, 8, 9, 10)
  zset_ok(qkey())
  local ak = akey()
  local ty = redis.call('TYPE', ak).ok
  if ty ~= 'set' and ty ~= 'none' then refuse(CORRUPT, ak, 'holds a ' .. ty .. ', not a set') end
end

-- drop removes id from every index, the quarantine index included, and
-- from the registry.
local function drop(id)
  for i = 2, 10 do redis.call('ZREM', KEYS[i], id) end
  redis.call('ZREM', qkey(), id)
  redis.call('SREM', akey(), id)
end

-- set_aside quarantines the damaged records of aside (see sift). It checks
-- every key it writes first, so it may be a call's first write; the call's
-- later writes go to keys it checked.
local function set_aside(aside)
  if #aside == 0 then return end
  writable_all()
  local q = qkey()
  for _, d in ipairs(aside) do
    if d.stray then
      redis.call('ZREM', KEYS[d.stray], d.id)
    else
      drop(d.id)
      local ok, t = pcall(parse_task, d.key, d.id, d.was or '', 0)
      if not (ok and t.state == 'quarantined') then
        redis.call('DEL', d.key)
        redis.call('SET', d.key, quarantine_record(d.reason, d.was))
      end
      redis.call('ZADD', q, '0', d.id)
      redis.call('SADD', akey(), d.id)
    end
  end
end

-- listed reports whether id has an entry in an index of the queue
-- (KEYS[2..10]): for an ID whose key holds nothing, an index entry without
-- its task, a damaged record that keeps the ID taken (see examine).
local function listed(id)
  for i = 2, 10 do
    if rcall(KEYS[i], 'ZSCORE', KEYS[i], id) then return true end
  end
  return false
end

-- registered returns, when the queue's registry is complete (see akey), a
-- map from each of ids to whether it is registered, else nil: one
-- SMISMEMBER (Redis 6.2), or one SISMEMBER each on a server without it. A
-- registry of another type refuses with CORRUPT.
local function registered(ids)
  local k, out = akey(), {}
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    local r = redis.pcall('SMISMEMBER', k, '', unpack(ids, i, j))
    if type(r) == 'table' and r.err then
      if string.find(r.err, 'WRONGTYPE', 1, true) then refuse(CORRUPT, k, r.err) end
      r = {rcall(k, 'SISMEMBER', k, '')}
      for x = i, j do r[#r + 1] = rcall(k, 'SISMEMBER', k, ids[x]) end
    end
    if r[1] ~= 1 then return nil end
    for x = 2, #r do out[ids[i + x - 2]] = r[x] == 1 end
  end
  return out
end

-- known reports whether the queue holds a record of id whose key holds
-- nothing (an index entry without its task, a damaged record that keeps
-- the ID taken): the registry says so when it is complete, else an index
-- lists it. Its second result says whether the registry was complete.
local function known(id)
  local k = akey()
  local r = redis.pcall('SMISMEMBER', k, '', id)
  if type(r) == 'table' and not r.err then
    if r[1] == 1 then return r[2] == 1, true end
    return listed(id), false
  end
  r = registered({id})
  if r then return r[id], true end
  return listed(id), false
end

-- registry_backlog returns what a queue without a complete registry adds
-- to build it: '' and every ID its indexes list, the quarantine index
-- included (read before the call's first write; see register).
local function registry_backlog()
  local out, q = {''}, qkey()
  for _, k in ipairs({KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], q}) do
    for _, id in ipairs(rcall(k, 'ZRANGE', k, '0', '-1')) do out[#out + 1] = id end
  end
  return out
end

-- register adds ids, and the backlog a queue without a complete registry
-- read (nil when complete), to the registry, after the call's other
-- writes: its type was read (registered), so the SADD cannot fail.
local function register(ids, backlog)
  if not backlog and #ids == 1 then
    redis.call('SADD', akey(), ids[1])
    return
  end
  local l = backlog or {}
  for _, id in ipairs(ids) do l[#l + 1] = id end
  bulk('SADD', akey(), l, 1)
end

-- unregister_first takes ids out of the registry as the call's first
-- write: a key of another type fails the SREM with nothing written, and
-- refuses.
local function unregister_first(ids)
  bulk('SREM', akey(), ids, 1, true)
end

-- taken_ids returns, for the IDs the n items of a batch name (the ID of
-- item i, from 0, is ARGV[first + stride * i]), whether each is taken as
-- Enqueue judges it: its key holds anything (a damaged record included),
-- or the registry holds it without its task (see known). It reads no
-- record: one MGET, then for the IDs with no string value one EXISTS and
-- one SMISMEMBER; on a queue without a complete registry one ZMSCORE per
-- index instead, and its second result is the registry's backlog (see
-- register).
local function taken_ids(first, stride, n)
  local by, ids, keys = {}, {}, {}
  for i = 0, n - 1 do
    local id = ARGV[first + stride * i]
    if by[id] == nil then
      by[id] = false
      ids[#ids + 1] = id
      keys[#keys + 1] = KEYS[11] .. id
    end
  end
  local free, freekeys = {}, {}
  for i = 1, #ids, 1000 do
    local r = redis.call('MGET', unpack(keys, i, math.min(i + 999, #ids)))
    for j = 1, #r do
      if r[j] then
        by[ids[i + j - 1]] = true
      else
        free[#free + 1] = ids[i + j - 1]
        freekeys[#freekeys + 1] = keys[i + j - 1]
      end
    end
  end
  if #free == 0 then return by end
  for i = 1, #free, 1000 do
    if redis.call('EXISTS', unpack(freekeys, i, math.min(i + 999, #free))) > 0 then
      for x = i, math.min(i + 999, #free) do
        if redis.call('EXISTS', freekeys[x]) == 1 then by[free[x]] = true end
      end
    end
  end
  local reg = registered(free)
  if reg then
    for _, id in ipairs(free) do
      if reg[id] then by[id] = true end
    end
    return by
  end
  for k = 2, 10 do
    local r = scores(k, free)
    for x = 1, #free do
      if r[x] then by[free[x]] = true end
    end
  end
  return by, registry_backlog()
end

-- examine reads the record of the task at key for an operator (Get,
-- Remove) without refusing for its own damage: the task (a quarantined
-- one included), or nil and why it cannot be trusted, or nil and nil when
-- there is none. A key with no value but an entry in an index is an index
-- entry without its task.
local function examine(key, id, seq)
  local v = redis.pcall('GET', key)
  if not v then
    if known(id) then return nil, 'index entry without its task' end
    return nil, nil
  end
  local t, why = judge(id, nil, nil, seq)
  return t, why
end

-- error_entry encodes one entry of the error history; lease_expired is
-- true, false, or 'cancelled' for an operator's Cancel.
local function error_entry(attempt, at, lease_expired, message)
  local flag = 0
  if lease_expired == 'cancelled' then flag = 2 elseif lease_expired then flag = 1 end
  return string.format('%d %d %d %d:', attempt, at, flag, #message) .. message
end

-- cancelled reports whether an operator's Cancel decided the task: it is
-- Failed and the last entry of its history has flag 2.
local function cancelled(t)
  if t.state ~= 'failed' then return false end
  local pos, n, last = 1, #t.errors, nil
  while pos <= n do
    local f, len, nxt = string.match(t.errors, '^%d+ %-?%d+ ([012]) (%d+):()', pos)
    if not f then return false end
    last, pos = f, nxt + tonumber(len)
  end
  return last == '2'
end

local function unindex(t)
  redis.call('ZREM', KEYS[ORDER[t.state]], t.id)
  redis.call('ZREM', KEYS[IDS[t.state]], t.id)
end

-- pack keeps the task's packed value in t.packed, for save and emit.
local function pack(t)
  if t.unique_key then
    t.packed = cmsgpack.pack(t.payload, t.priority, t.state, t.attempt,
      t.max_attempts, t.version, t.token, t.enqueued_at, t.run_after,
      t.claimed_at, t.deadline, t.finished_at, t.errors, t.result, t.timeout,
      t.unique_key, t.unique_until)
    return
  end
  t.packed = cmsgpack.pack(t.payload, t.priority, t.state, t.attempt,
    t.max_attempts, t.version, t.token, t.enqueued_at, t.run_after,
    t.claimed_at, t.deadline, t.finished_at, t.errors, t.result, t.timeout)
end

local function save(t)
  pack(t)
  redis.call('SET', t.key, t.packed)
end

-- zadd_first adds id at sc to the index KEYS[k] as a call's first write: a
-- key of another type fails the ZADD with nothing written yet, and refuses.
-- This spares a TYPE read of that key.
local function zadd_first(k, sc, id)
  local r = redis.pcall('ZADD', KEYS[k], sc, id)
  if type(r) == 'table' and r.err then refuse(CORRUPT, KEYS[k], r.err) end
end

-- move writes a task a call changed, as the call's first write: out of the
-- indexes of the state it was in (t.was, nil for a new task) and into those
-- of its state, then saved. The two indexes it adds to are checked by the
-- writes themselves, with no TYPE read: the ZADD to the new state's ID
-- index comes first (when the state changes), so a key of another type
-- fails it with nothing written; the ZADD to the order index comes next,
-- and when its key is of another type the entry the first ZADD added is
-- taken out again before the refusal, so the call still changes nothing
-- (the script is atomic: no one sees the entry in between). The indexes of
-- the old state were read by the checks, so their ZREMs cannot fail. An
-- index both states share is written once (a ZADD updates the score).
local function move(t)
  local was, o, i = t.was, ORDER[t.state], IDS[t.state]
  if was == t.state then
    zadd_first(o, fmt(score(t)), t.id)
  else
    local added = redis.pcall('ZADD', KEYS[i], '0', t.id)
    if type(added) == 'table' and added.err then refuse(CORRUPT, KEYS[i], added.err) end
    local r = redis.pcall('ZADD', KEYS[o], fmt(score(t)), t.id)
    if type(r) == 'table' and r.err then
      if added == 1 then redis.call('ZREM', KEYS[i], t.id) end
      refuse(CORRUPT, KEYS[o], r.err)
    end
  end
  if was and ORDER[was] ~= o then redis.call('ZREM', KEYS[ORDER[was]], t.id) end
  if was and was ~= t.state then redis.call('ZREM', KEYS[IDS[was]], t.id) end
  save(t)
end

-- create writes a new task as the call's first writes: SET NX of its key
-- first, which writes nothing when the key holds anything, a damaged
-- record included (the ID is taken: EXISTS), then into the indexes of its
-- state, each ZADD checking its own key; when one fails, the writes before
-- it are taken back before the refusal (the script is atomic: no one sees
-- them), so the call still changes nothing. This spares the EXISTS and
-- TYPE reads of those keys.
local function create(t)
  pack(t)
  if not redis.call('SET', t.key, t.packed, 'NX') then refuse(EXISTS) end
  local o, i = ORDER[t.state], IDS[t.state]
  local added = redis.pcall('ZADD', KEYS[i], '0', t.id)
  if type(added) == 'table' and added.err then
    redis.call('DEL', t.key)
    refuse(CORRUPT, KEYS[i], added.err)
  end
  local r = redis.pcall('ZADD', KEYS[o], fmt(score(t)), t.id)
  if type(r) == 'table' and r.err then
    if added == 1 then redis.call('ZREM', KEYS[i], t.id) end
    redis.call('DEL', t.key)
    refuse(CORRUPT, KEYS[o], r.err)
  end
end

-- store_all writes many changed tasks at once, as the call's first writes:
-- each out of the indexes of the state it was in (t.was, nil for a new
-- task) and into those of its state, then saved, with one ZREM or ZADD per
-- index and one MSET. Every index it adds to is checked first: by the
-- reads of the call's checks (CALL.zsets), with TYPE, or, for one of them,
-- by its own ZADD, sent before every other write, which fails with nothing
-- written when the key is of another type.
--
-- A few tasks are written one by one instead (STORE_ONE_BY_ONE), each with
-- move: the Lua of the grouping (a list per index, grown an element at a
-- time, and a table per command) costs more than the writes it spares
-- until the tasks are several. The first task's move checks the two
-- indexes it adds to itself; every other index a later move adds to is
-- checked before the first write (CALL.zsets, else TYPE).
local STORE_ONE_BY_ONE = 4

local function store_all(ts)
  local n = #ts
  if n == 0 then return end
  if n <= STORE_ONE_BY_ONE then
    local t1 = ts[1]
    local own1, own2 = KEYS[ORDER[t1.state]], false
    if t1.was ~= t1.state then own2 = KEYS[IDS[t1.state]] end
    for x = 2, n do
      local t = ts[x]
      local o = KEYS[ORDER[t.state]]
      if o ~= own1 and o ~= own2 then zset_ok(o) end
      if t.was ~= t.state then
        local i = KEYS[IDS[t.state]]
        if i ~= own1 and i ~= own2 then zset_ok(i) end
      end
    end
    for x = 1, n do move(ts[x]) end
    return
  end
  local rems, adds, mset = {}, {}, {}
  for x = 1, n do
    local t = ts[x]
    local was, st, id = t.was, t.state, t.id
    local o = ORDER[st]
    if was then
      local wo = ORDER[was]
      if wo ~= o then
        local l = rems[wo]
        if l then l[#l + 1] = id else rems[wo] = {id} end
      end
      if was ~= st then
        local wi = IDS[was]
        local l = rems[wi]
        if l then l[#l + 1] = id else rems[wi] = {id} end
      end
    end
    if was ~= st then
      local si = IDS[st]
      local l = adds[si]
      if l then
        l[#l + 1] = '0'
        l[#l + 1] = id
      else
        adds[si] = {'0', id}
      end
    end
    local sc = fmt(score(t))
    local l = adds[o]
    if l then
      l[#l + 1] = sc
      l[#l + 1] = id
    else
      adds[o] = {sc, id}
    end
    pack(t)
    mset[2 * x - 1] = t.key
    mset[2 * x] = t.packed
  end
  local unchecked
  for k in pairs(adds) do
    if not CALL.zsets[KEYS[k]] then
      if unchecked then writable(unchecked) end
      unchecked = k
    end
  end
  if unchecked then
    bulk('ZADD', KEYS[unchecked], adds[unchecked], 2, true)
    adds[unchecked] = nil
  end
  for k, l in pairs(rems) do bulk('ZREM', KEYS[k], l, 1) end
  for k, l in pairs(adds) do bulk('ZADD', KEYS[k], l, 2) end
  bulk('MSET', nil, mset, 2)
end

-- emit appends the task to a reply: its ID, then its packed value (the Go
-- side decodes it like a stored one).
local function emit(out, t)
  local n = #out
  out[n + 1] = t.id
  out[n + 2] = t.packed
  return out
end

-- replay answers a call on one task sent again: when the call's memo key
-- holds an answer, the call was applied (whatever has happened to the task
-- since) and that answer is given again, with the clock reading it had,
-- and nothing is written. The memo holds {now, packed task}.
local function replay(id)
  if CALL.req == '' then return end
  local k = KEYS[#KEYS]
  local v = rcall(k, 'GET', k)
  if not v then return end
  local ok, m = pcall(cmsgpack.unpack, v)
  if not ok or type(m) ~= 'table' or type(m[1]) ~= 'string' or type(m[2]) ~= 'string' then
    refuse(CORRUPT, k, 'remembered answer does not parse')
  end
  error({leasehold = {OK, m[1], id, m[2]}}, 0)
end

-- answer is the reply of a call on one task that succeeded: it remembers
-- the reply under the call's memo key for CALL.ttl s (see replay), then
-- gives it.
local function answer(now, t)
  if CALL.req ~= '' then
    redis.call('SET', KEYS[#KEYS], cmsgpack.pack({fmt(now), t.packed}), 'EX', CALL.ttl)
  end
  return emit({OK, fmt(now)}, t)
end

-- recall returns what an earlier run of this call remembered (a list), or
-- nil when it has not run (or changed nothing).
local function recall()
  if CALL.req == '' then return nil end
  local k = KEYS[#KEYS]
  local v = rcall(k, 'GET', k)
  if not v then return nil end
  local ok, m = pcall(cmsgpack.unpack, v)
  if not ok or type(m) ~= 'table' then refuse(CORRUPT, k, 'remembered answer does not parse') end
  for i = 1, #m do
    if type(m[i]) ~= 'string' then refuse(CORRUPT, k, 'remembered answer does not parse') end
  end
  return m
end

-- remember keeps m (a list of strings) as this call's answer for CALL.ttl s.
local function remember(m)
  if CALL.req ~= '' then redis.call('SET', KEYS[#KEYS], cmsgpack.pack(m), 'EX', CALL.ttl) end
end

-- recall_reply returns the whole reply an earlier run of this call gave
-- (see remember_reply), or nil when it has not run (or changed nothing).
local function recall_reply()
  if CALL.req == '' then return nil end
  local k = KEYS[#KEYS]
  local v = rcall(k, 'GET', k)
  if not v then return nil end
  local ok, m = pcall(cmsgpack.unpack, v)
  if not ok or type(m) ~= 'table' or m[1] ~= OK then refuse(CORRUPT, k, 'remembered answer does not parse') end
  for i = 2, #m do
    if type(m[i]) ~= 'string' then refuse(CORRUPT, k, 'remembered answer does not parse') end
  end
  return m
end

-- remember_reply keeps a call's whole reply (a list: OK, then strings) for
-- CALL.ttl s and returns it: a retransmission is answered with exactly it,
-- the clock reading included, whatever happened to its tasks since.
local function remember_reply(out)
  if CALL.req ~= '' then redis.call('SET', KEYS[#KEYS], cmsgpack.pack(out), 'EX', CALL.ttl) end
  return out
end

-- The write helpers below change a loaded task (a Lua table); a script
-- marks the state it leaves (t.was) and writes the task with move or
-- store_all, after every check of the script passed.

-- queue_at returns the task to the queue: Scheduled if run_after is after
-- now, else Ready; the claim and its timestamps are cleared.
local function queue_at(t, now, run_after)
  t.run_after = run_after
  t.state = 'ready'
  if run_after and run_after > now then t.state = 'scheduled' end
  t.token = 0
  t.claimed_at = false
  t.deadline = false
  t.finished_at = false
end

-- finish moves a Running task to a terminal state.
local function finish(t, state, now)
  t.state = state
  t.finished_at = now
  t.deadline = false
end

-- The guards. Tokens and versions from the caller are compared as decimal
-- strings, so a forged value of any size is just a mismatch.

-- claimed checks a worker claim on the task at KEYS[12]: it exists (else
-- STALE_CLAIM missing), its token is the claim's (else STALE_CLAIM token)
-- and it is Running (else TRANSITION).
local function claimed(id, token, seq)
  replay(id)
  local t = load_task(KEYS[12], id, seq)
  if not t then refuse(STALE, 'missing') end
  if fmt(t.token) ~= token then refuse(STALE, 'token') end
  if cancelled(t) then refuse(STALE, 'cancelled') end
  if t.state ~= 'running' then refuse(TRANSITION, t.state) end
  check_indexed(t)
  return t
end

-- reaped checks a broker claim: the task exists (else STALE_CLAIM missing),
-- its version is the claim's (else STALE_CLAIM version) and it is Running
-- (else TRANSITION).
local function reaped(id, version, seq)
  replay(id)
  local t = load_task(KEYS[12], id, seq)
  if not t then refuse(STALE, 'missing') end
  if fmt(t.version) ~= version then refuse(STALE, 'version') end
  if t.state ~= 'running' then refuse(TRANSITION, t.state) end
  check_indexed(t)
  return t
end

-- inspected checks an operator's action: the task exists (else NOT_FOUND)
-- and, when expect is not '0', is at that version (else VERSION_CONFLICT).
-- The caller checks the state.
local function inspected(id, expect, seq)
  replay(id)
  local t = load_task(KEYS[12], id, seq)
  if not t then refuse(NOT_FOUND) end
  if expect ~= '0' and fmt(t.version) ~= expect then refuse(VERSION_CONFLICT, fmt(t.version)) end
  return t
end

-- ack_tasks reads the tasks the n acks of a batch name (the ID of item i,
-- from 0, is ARGV[first + 3i]), as load_items does, each checked against
-- its indexes: a map from ID to the task (false where there is none), and
-- a map from the ID of each damaged record among them (see judge; an
-- index entry without its task included) to why. The common case, nothing
-- damaged, reads as load_items and check_all do; only when that meets a
-- record's damage are the items judged one by one. Damage to a queue-wide
-- key still refuses the call.
local function ack_tasks(first, n, seq)
  if n == 1 then
    -- One item (a concurrency-1 worker's cycle): the same reads, without
    -- the lists of many.
    local id = ARGV[first]
    local ok, t = pcall(load_task, KEYS[11] .. id, id, seq)
    if ok and t then ok = pcall(check_indexed, t) end
    if ok then return {[id] = t or false}, {} end
  end
  local ok, tasks, ids = pcall(load_items, first, 3, n, seq)
  if ok then
    local found = {}
    for _, id in ipairs(ids) do
      if tasks[id] then found[#found + 1] = tasks[id] end
    end
    ok, ids = pcall(check_all, found)
    if ok then return tasks, {} end
    tasks = ids
  end
  if not (type(tasks) == 'table' and tasks.leasehold and tasks.leasehold[1] == CORRUPT) then error(tasks, 0) end
  local by, damaged = {}, {}
  for i = 0, n - 1 do
    local id = ARGV[first + 3 * i]
    if by[id] == nil then
      by[id] = false
      local key = KEYS[11] .. id
      if redis.call('EXISTS', key) == 1 or known(id) then
        local t, why = judge(id, nil, nil, seq)
        if t then by[id] = t else damaged[id] = why end
      end
    end
  end
  return by, damaged
end

-- ack_items decides the n acks of a batch, item i being ARGV[first + 3i]
-- (task ID), ARGV[first + 1 + 3i] (claim token) and ARGV[first + 2 + 3i]
-- (result), against the loaded tasks and what the items before it left:
-- a task Running under the item's token succeeds, stamped with the version
-- after the last; an item on a damaged record (damaged, from ack_tasks) is
-- CORRUPT whatever its token, as a decision on it is; any other is answered
-- with its refusal. It returns the answers (a task, or {code, detail...}),
-- the tasks acked and the last version.
local function ack_items(tasks, damaged, first, n, version, now)
  local items, acked = {}, {}
  for i = 0, n - 1 do
    local id, token = ARGV[first + 3 * i], ARGV[first + 1 + 3 * i]
    local t = tasks[id]
    if damaged[id] then
      items[i + 1] = {CORRUPT, KEYS[11] .. id, damaged[id]}
    elseif not t then
      items[i + 1] = {STALE, 'missing'}
    elseif fmt(t.token) ~= token then
      items[i + 1] = {STALE, 'token'}
    elseif cancelled(t) then
      items[i + 1] = {STALE, 'cancelled'}
    elseif t.state ~= 'running' then
      items[i + 1] = {TRANSITION, t.state}
    else
      version = version + 1
      t.was = t.state
      t.version = version
      t.result = ARGV[first + 2 + 3 * i]
      finish(t, 'succeeded', now)
      items[i + 1] = t
      acked[#acked + 1] = t
    end
  end
  return items, acked, version
end

-- emit_items appends the answers of a batch's n items to a reply: for a
-- task '0', '2' and the task (ID, packed value); for a refusal its code,
-- the number of its details (at least 1) and them.
local function emit_items(out, items, n)
  for i = 1, n do
    local it = items[i]
    if it.id then
      out[#out + 1] = '0'
      out[#out + 1] = '2'
      emit(out, it)
    else
      local n = math.max(#it - 1, 1)
      out[#out + 1] = fmt(it[1])
      out[#out + 1] = fmt(n)
      for j = 2, n + 1 do out[#out + 1] = it[j] or '' end
    end
  end
  return out
end
