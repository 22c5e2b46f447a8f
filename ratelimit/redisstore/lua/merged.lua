-- Merged calls, for the EVALSHA script (the function library has no
-- merged calls: see merge.go). One call may carry several independent
-- calls of decide(KEYS, ARGV), run one after another in order, so that
-- Redis pays its fixed cost of a script call (parsing the command,
-- finding the script, building KEYS and ARGV, running the whole chunk,
-- which builds the algorithms' tables and closures, entering Lua, TIME)
-- once for all of them. All the keys still share one hash slot.
--
-- ARGV[1]: 'm'.
-- ARGV[2]: the number of calls m, at least 1.
-- Then, per call in order: its number of keys k, its number of arguments
-- a, and its a arguments (its ARGV); its keys are the next k of KEYS. The
-- arguments and keys must add up to ARGV and KEYS exactly, and no count
-- may exceed MAX_COUNT; otherwise the merged call fails whole, before any
-- call runs.
--
-- Each call runs as if alone, under pcall: an error it raises (a
-- redis.call failing on a key of the wrong type, a Lua error) is that
-- call's reply, as an error, and the next call runs; what the failing
-- call wrote before the error stays written, as it would alone (Redis
-- never undoes a script's writes). A call that reads the server clock
-- (its ARGV[2] is '') gets the time read once by TIME for the whole
-- merged call: the calls decide at one instant, as separate calls would
-- within one microsecond.
--
-- Reply: one flat array (one table for Redis to convert, instead of one
-- per call), the calls' replies in order, each as its length n and its n
-- values, or as -1 and its error.

-- The error reply of a malformed merged call.
local function merged_error(problem)
  return redis.error_reply('ERR quotagate: merged call: ' .. problem)
end

-- The counts of merged calls read so far, by text: tonumber costs two
-- conversions by the C library's strtod, a lookup here none, and a merged
-- call repeats a few counts (its calls' numbers of keys and arguments).
-- Only counts up to MAX_COUNT are kept, so the table stays small (the
-- store's merged calls carry at most 1024 arguments, so every count is
-- below it). MAX_COUNT is also the most values copy_of copies through
-- unpack, which puts them on Lua's C stack (LUAI_MAXCSTACK, 8000).
local counts, MAX_COUNT = {}, 4000

-- The count that text (a decimal integer 0 <= n <= MAX_COUNT) gives, or
-- nil.
local function count_of(text)
  local n = counts[text]
  if n then return n end
  if not text or not string.find(text, '^%d+$') then return nil end
  n = tonumber(text)
  if n > MAX_COUNT then return nil end
  counts[text] = n
  return n
end

-- The values t[from + 1 .. from + n], n <= MAX_COUNT, as a new array. A
-- table filled one value at a time grows, and is rehashed, at every
-- power of two, which costs more than the rest of the copy; one built
-- from unpack's values is made at its size at once.
local function copy_of(t, from, n)
  return {unpack(t, from + 1, from + n)}
end

local function decide_merged(KEYS, ARGV)
  local m = count_of(ARGV[2])
  if not m or m < 1 then return merged_error('count must be a positive integer') end
  local nkeys, nargs = #KEYS, #ARGV
  -- Check the counts before running any call.
  local p, q = 3, 0 -- the next argument and the keys used so far
  for c = 1, m do
    local k, a = count_of(ARGV[p]), count_of(ARGV[p + 1])
    if not k or not a or q + k > nkeys or p + 1 + a > nargs then
      return merged_error('call ' .. c .. ' has bad key or argument counts')
    end
    q, p = q + k, p + 2 + a
  end
  if q ~= nkeys or p ~= nargs + 1 then return merged_error('keys or arguments left over') end
  local out, o = {}, 0 -- the reply and its length
  local clock -- the server time's text, read on first need
  p, q = 3, 0
  for c = 1, m do
    local k, a = counts[ARGV[p]], counts[ARGV[p + 1]]
    local keys, argv = copy_of(KEYS, q, k), copy_of(ARGV, p + 1, a)
    q, p = q + k, p + 2 + a
    if argv[2] == '' then
      if not clock then
        local t = redis.call('TIME')
        local us = t[2]
        clock = t[1] .. ZEROS[#us] .. us
      end
      argv[2] = clock
    end
    local ok, r = pcall(decide, keys, argv)
    if ok and type(r) == 'table' and not r.err then
      -- Up to the first nil, as Redis reads a reply; decide's reply
      -- tables are reused by later calls (see state.lua), so the values
      -- are copied out.
      out[o + 1] = 0
      local n = 0
      while r[n + 1] ~= nil do
        n = n + 1
        out[o + 1 + n] = r[n]
      end
      out[o + 1] = n
      o = o + 1 + n
    else
      if type(r) == 'table' and r.err then
        r = {err = r.err} -- an error reply, or a raised error table
      elseif type(r) == 'string' and string.find(r, '^%u[%u_]* ') then
        r = {err = r} -- a redis.call error: its code, then its message
      else
        r = {err = 'ERR quotagate: ' .. tostring(r)}
      end
      out[o + 1], out[o + 2] = -1, r
      o = o + 2
    end
  end
  return out
end

-- The entry point: a merged call, or one call of decide.
local function entry(KEYS, ARGV)
  if ARGV[1] == 'm' then return decide_merged(KEYS, ARGV) end
  return decide(KEYS, ARGV)
end
