-- Entry point. One call decides, evaluates, refunds or settles one group
-- of keys that share a hash slot, atomically. This file is the body of
-- the function decide(KEYS, ARGV) (the Go side wraps it), which the
-- function library registers and the EVALSHA script calls.
--
-- KEYS[i]: the key of item i (a key may appear more than once). To settle,
--          the last key is the settlement's marker, not an item.
-- ARGV[1]: 'd' to decide, 'e' to evaluate without consuming, 'r' to refund,
--          'w' to renew concurrency slots, 's' to settle.
-- ARGV[2]: now in µs since the Unix epoch, or '' to use the server clock.
-- ARGV[3..]: per item, 11 values: algorithm, rate (for concurrency: max),
--            per (µs), burst, cost, shadow (1 or 0), want (to settle: the
--            reservation's time in µs, 0 when unknown), for a calendar
--            fixed window the start and end of the current window by the
--            caller's clock and the end of the next one (µs; all 0
--            otherwise), and the holder of a concurrency slot ('' otherwise).
--
-- Items are evaluated in order; an item that fits tentatively takes its
-- cost, so a later item of the same key sees it. Decide consumes (writes)
-- only when every non-shadow item fits; evaluate never writes.
--
-- want reserves a block: when it exceeds cost and the algorithm can say how
-- many whole units it holds (token bucket), an item that fits takes
-- min(want, available) units instead of its cost (never fewer than cost).
-- Fitting is still decided on cost alone.
--
-- Decide and evaluate reply {admitted, then per item: allowed, remaining,
-- retry_us, reset_us, remaining_before, reset_before_us, taken, debt}, all
-- integers below 2^53. When admitted, remaining and reset_us count the
-- units the item took; otherwise they do not. remaining_before and
-- reset_before_us never count them (they are what to report if the group is
-- refunded later). taken is the units the item consumed: 0 unless the group
-- was admitted and the item fitted. debt is the units the key owes beyond
-- empty after a settlement (a decision never changes it). The last value
-- is now, the time (µs) the call decided at.
--
-- Refund gives each item's cost back and keeps each key's expiry (a refund
-- never makes a key live longer); for a concurrency item it releases the
-- holder's slot. Reply: {1}.
--
-- Renew extends each concurrency item's slot, when its holder still holds
-- it, to now + per; a holder whose slot is gone takes it back when the key
-- has room. Reply: per item, 1 when renewed, 2 when taken back, 0 when
-- lost (the key was full, or the item is not a concurrency item).
--
-- Settle applies each item's cost as a signed delta, a refund to what the
-- reservation made at its want charged (see the algorithms' settle), and sets each changed key's expiry from its new state, unless
-- the marker key exists: then it changes nothing. It creates the marker
-- with a time to live of ARGV[3 + 11 * items] ms. Reply: {1} when applied,
-- {0} when the marker existed (already settled). Concurrency items are
-- never settled.

if redis.replicate_commands then redis.replicate_commands() end

local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local mode = ARGV[1]

local n = #KEYS
if mode == 's' then n = n - 1 end
local items = {}
for i = 1, n do
  local b = 2 + (i - 1) * 11
  local alg = ALGORITHMS[cached_number(ARGV[b + 1])]
  if not alg then return redis.error_reply('ERR unknown algorithm ' .. tostring(ARGV[b + 1])) end
  -- Values that are mostly 0 are parsed only when they are not (each
  -- tonumber is a strtod).
  local lim = {rate = cached_number(ARGV[b + 2]), per = cached_number(ARGV[b + 3]), burst = cached_number(ARGV[b + 4]),
               holder = ARGV[b + 11]}
  if ARGV[b + 9] ~= '0' then
    lim.cs, lim.ce, lim.cn = tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10])
  end
  local want = 0
  if ARGV[b + 7] ~= '0' then want = tonumber(ARGV[b + 7]) or 0 end
  items[i] = {
    alg = alg,
    lim = lim,
    cost = cached_number(ARGV[b + 5]),
    shadow = ARGV[b + 6] == '1',
    want = want,
  }
end

-- The working state of each distinct key: {alg, lim, s, dirty}. A key whose
-- working state belongs to another algorithm is read afresh, as absent when
-- that state was changed in this call.
local work = {}
local order = {}
local function state_for(key, it)
  local w = work[key]
  if w and w.alg == it.alg then return w end
  local fresh = {alg = it.alg, lim = it.lim, dirty = false}
  if w and w.dirty then
    -- Keep the changed state unless this item changes the key in turn.
    fresh.s = it.alg.load(nil, it.lim, now)
    fresh.s.stale = true
    return fresh
  end
  fresh.s = it.alg.load(key, it.lim, now)
  if not w then order[#order + 1] = key end
  work[key] = fresh
  return fresh
end

if mode == 'w' then
  local renewed = {}
  for i = 1, n do
    local it = items[i]
    renewed[i] = it.alg.renew and it.alg.renew(KEYS[i], it.lim, now) or 0
  end
  return renewed
end

-- Refund ('r') and settle ('s') apply change(it, s) to each item's state
-- (true when it changed the state) and save the changed keys, keeping
-- their expiry for a refund and setting it afresh for a settlement.
local function adjust(change, keep_ttl)
  for i = 1, n do
    local it = items[i]
    local w = state_for(KEYS[i], it)
    if it.cost ~= 0 and change(it, w.s) then
      w.dirty, w.lim = true, it.lim
      work[KEYS[i]] = w
    end
  end
  for _, key in ipairs(order) do
    local w = work[key]
    if w.dirty then w.alg.save(key, w.s, w.lim, keep_ttl) end
  end
  return {1}
end

if mode == 'r' then
  return adjust(function(it, s) return it.cost > 0 and it.alg.give(s, it.lim, it.cost) end, true)
end

if mode == 's' then
  local ttl = tonumber(ARGV[3 + n * 11])
  if not ttl or ttl < 1 then return redis.error_reply('ERR bad settlement marker ttl') end
  if not redis.call('SET', KEYS[n + 1], '1', 'NX', 'PX', ttl) then return {0} end
  return adjust(function(it, s) return it.alg.settle(s, it.lim, it.cost, it.want) end, false)
end

-- The reply is written in place: each item's values as if the group is
-- admitted, corrected below when it is not.
local admitted = 1
local reply = {0}
for i = 1, n do
  local it = items[i]
  local w = state_for(KEYS[i], it)
  local allowed = it.alg.fits(w.s, it.lim, it.cost)
  if not allowed and not it.shadow then admitted = 0 end
  local rem0, retry, reset0, debt = it.alg.report(w.s, it.lim, it.cost, allowed)
  local rem1, reset1 = rem0, reset0
  local taken = 0
  if allowed and it.cost > 0 then
    taken = it.cost
    if it.want > it.cost and it.alg.avail then
      local a = it.alg.avail(w.s, it.lim)
      if a > it.want then a = it.want end
      if a > taken then taken = a end
    end
    it.alg.take(w.s, it.lim, taken)
    w.dirty, w.lim = true, it.lim
    work[KEYS[i]] = w
    local _retry
    rem1, _retry, reset1 = it.alg.report(w.s, it.lim, it.cost, true)
  end
  local a = 0
  if allowed then a = 1 end
  local o = 1 + (i - 1) * 8
  reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = a, rem1, retry, reset1
  reply[o + 5], reply[o + 6], reply[o + 7], reply[o + 8] = rem0, reset0, taken, debt or 0
end
if mode ~= 'd' then admitted = 0 end

if admitted == 1 then
  for _, key in ipairs(order) do
    local w = work[key]
    if w.dirty then w.alg.save(key, w.s, w.lim, false) end
  end
else
  -- Nothing was consumed: remaining and reset as before, nothing taken.
  for i = 1, n do
    local o = 1 + (i - 1) * 8
    reply[o + 2], reply[o + 4], reply[o + 7] = reply[o + 5], reply[o + 6], 0
  end
end
reply[1] = admitted
reply[1 + n * 8 + 1] = now
return reply
