#!lua name=quotagate_b1116abf5878
-- lua/prelude.lua
-- Shared arithmetic for the rate limit scripts.
--
-- Lua numbers are doubles: integers are exact below 2^53, and every value
-- kept or compared here stays below that bound (the Go side validates
-- limits so that Burst*Per and Rate*Per are at most 2^53). Divisions use
-- math.fmod, which is exact, so quotients are exact too.

local MAX_EXACT = 9007199254740992 -- 2^53

-- floor(a / b) for a >= 0, b > 0.
local function fdiv(a, b)
  return (a - math.fmod(a, b)) / b
end

-- ceil(a / b) for b > 0 and any integer a.
local function cdiv(a, b)
  if a <= 0 then
    local q = fdiv(-a, b)
    if q == 0 then return 0 end
    return -q
  end
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

-- floor(a * b / c) for integers 0 <= a, b, c < 2^53, c > 0, computed exactly
-- even when a * b is not representable. Returns nil when the quotient is
-- 2^53 or more.
local function muldiv(a, b, c)
  if a == 0 or b == 0 then return 0 end
  if a <= fdiv(MAX_EXACT, b) then return fdiv(a * b, c) end
  -- Multiply in base 2^16 limbs (little-endian), then divide bit by bit.
  local A, B, P = {}, {}, {0, 0, 0, 0, 0, 0, 0, 0}
  for i = 1, 4 do
    A[i] = math.fmod(a, 65536); a = (a - A[i]) / 65536
    B[i] = math.fmod(b, 65536); b = (b - B[i]) / 65536
  end
  for i = 1, 4 do
    for j = 1, 4 do P[i + j - 1] = P[i + j - 1] + A[i] * B[j] end
  end
  local carry = 0
  for k = 1, 8 do
    local v = P[k] + carry
    P[k] = math.fmod(v, 65536)
    carry = (v - P[k]) / 65536
  end
  local q, rem = 0, 0
  for k = 8, 1, -1 do
    local limb = P[k]
    for bit = 15, 0, -1 do
      local d, p = 0, 2 ^ bit
      if limb >= p then d = 1; limb = limb - p end
      -- rem = 2*rem + d, reduced modulo c without leaving the exact range.
      if rem >= c - rem - d then
        rem = rem - (c - rem) + d
        q = 2 * q + 1
      else
        rem = 2 * rem + d
        q = 2 * q
      end
      if q >= MAX_EXACT then return nil end
    end
  end
  return q
end

-- Sets the key's time to live to us microseconds rounded up to whole
-- milliseconds, at least 1 ms.
local function expire_us(key, us)
  local ms = cdiv(us, 1000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', key, ms)
end

-- Reads a hash's fields as numbers; a missing field is nil. A nil key
-- reads as an absent one.
local function hget_numbers(key, ...)
  local out = {}
  if not key then return out end
  local v = redis.call('HMGET', key, ...)
  for i = 1, select('#', ...) do
    if v[i] then out[i] = tonumber(v[i]) end
  end
  return out
end

-- Algorithms register themselves here by their Go Algorithm value. Each
-- provides:
--   load(key, lim, now) -> s     state normalised to now (absent = full);
--                                a nil key is absent; s.stale is true when
--                                another algorithm wrote the key
--   fits(s, lim, cost) -> bool
--   take(s, lim, cost)           consume cost
--   avail(s, lim) -> units       optional: whole units available now, so
--                                that an item can reserve a block
--   report(s, lim, cost, allowed) -> remaining, retry_us, reset_us, debt
--                                (debt: units owed beyond empty after a
--                                settlement; optional, nil is 0)
--   save(key, s, lim, keep_ttl)  write the state, and its TTL unless keep_ttl
--   give(s, lim, cost) -> bool   refund cost; true when s changed
--   settle(s, lim, delta, at) -> bool  apply a signed settlement (see
--                                ratelimit.Settle): a refund never above
--                                capacity, to what the reservation made
--                                at at (µs; 0 unknown) charged, a charge
--                                even past it (debt); true when s changed
-- lim has fields rate, per (µs), burst; s carries the time it was
-- normalised to as s.now.
local ALGORITHMS = {}

-- lua/tokenbucket.lua
-- Token bucket. Hash fields: a = algorithm (1), l = level (tokens * per),
-- s = stamp (µs), p = per (µs) the level is scaled by.

ALGORITHMS[1] = {
  load = function(key, lim, now)
    local cap = lim.burst * lim.per
    local s = {cap = cap, now = now, level = cap, stamp = now}
    local v = hget_numbers(key, 'a', 'l', 's', 'p')
    s.stale = v[1] ~= nil and v[1] ~= 1
    if v[1] ~= 1 or not v[2] or not v[3] or not v[4] or v[4] <= 0 then
      return s -- absent (or written by another algorithm): full
    end
    local level, stamp, per = v[2], v[3], v[4]
    -- A level below 0 is a debt (a settlement charged past the bucket),
    -- kept down to cap - 2^53 so that every sum below stays exact. A
    -- change of per forgives it.
    if level < cap - MAX_EXACT then level = cap - MAX_EXACT end
    if per ~= lim.per then
      if level < 0 then level = 0 end
      level = muldiv(level, lim.per, per) or cap
      if level > cap then level = cap end
    end
    local elapsed = now - stamp
    if elapsed < 0 then
      elapsed = 0 -- the clock went back: no capacity, and keep the stamp
    else
      stamp = now
    end
    if elapsed >= cdiv(cap - level, lim.rate) then
      level = cap
    else
      level = level + elapsed * lim.rate
    end
    s.level, s.stamp = level, stamp
    return s
  end,

  fits = function(s, lim, cost)
    return s.level >= cost * lim.per
  end,

  take = function(s, lim, cost)
    s.level = s.level - cost * lim.per
  end,

  -- Whole units available now.
  avail = function(s, lim)
    if s.level <= 0 then return 0 end
    return fdiv(s.level, lim.per)
  end,

  report = function(s, lim, cost, allowed)
    local retry = 0
    if not allowed then retry = cdiv(cost * lim.per - s.level, lim.rate) end
    local reset = 0
    if s.level < s.cap then reset = cdiv(s.cap - s.level, lim.rate) end
    local debt = 0
    if s.level < 0 then debt = cdiv(-s.level, lim.per) end
    return ALGORITHMS[1].avail(s, lim), retry, reset, debt
  end,

  save = function(key, s, lim, keep_ttl)
    if s.level >= s.cap then
      redis.call('DEL', key) -- a full bucket is the same as an absent one
      return
    end
    if s.stale then redis.call('DEL', key) end
    redis.call('HSET', key, 'a', 1, 'l', s.level, 's', s.stamp, 'p', lim.per)
    -- Full again reset µs after the stamp, which is ahead of now when the
    -- clock went back.
    local ahead = s.stamp - s.now
    if ahead < 0 then ahead = 0 end
    if not keep_ttl then expire_us(key, cdiv(s.cap - s.level, lim.rate) + ahead) end
  end,

  give = function(s, lim, cost)
    if s.level >= s.cap then return false end
    local need = cost * lim.per
    if need >= s.cap - s.level then
      s.level = s.cap
    else
      s.level = s.level + need
    end
    return true
  end,

  settle = function(s, lim, delta)
    if delta < 0 then return ALGORITHMS[1].give(s, lim, -delta) end
    local level = s.level - delta * lim.per
    if level < s.cap - MAX_EXACT then level = s.cap - MAX_EXACT end
    s.level = level
    return true
  end,
}

-- lua/fixedwindow.lua
-- Fixed window. Hash fields: a = algorithm (2), w = window number
-- (floor(now / per)), n = units counted in it, p = per (µs).
--
-- A calendar window (lim.ce > 0) is numbered by its start (µs), and p is
-- its own length. The caller passes the window holding its clock
-- [cs, ce) and the next window's end cn; the script takes the next window
-- when its own clock is past ce.

local function load_calendar(key, lim, now)
  local start, fin = lim.cs, lim.ce
  if now >= fin then start, fin = lim.ce, lim.cn end
  local s = {now = now, w = start, window = start, count = 0, kept = false, cal = true, p = fin - start}
  local v = hget_numbers(key, 'a', 'w', 'n', 'p')
  s.stale = v[1] ~= nil and v[1] ~= 2
  if v[1] ~= 2 or not v[2] or not v[3] or not v[4] then return s end
  if v[2] > start or (v[2] == start and v[4] == s.p) then
    -- Same window, or a later one (the clock went back): keep it.
    s.window, s.count, s.p, s.kept = v[2], v[3], v[4], true
  end
  return s
end

ALGORITHMS[2] = {
  load = function(key, lim, now)
    if lim.ce and lim.ce > 0 then return load_calendar(key, lim, now) end
    local into = math.fmod(now, lim.per)
    local w = (now - into) / lim.per
    local s = {now = now, w = w, window = w, count = 0, kept = false}
    local v = hget_numbers(key, 'a', 'w', 'n', 'p')
    s.stale = v[1] ~= nil and v[1] ~= 2
    if v[1] ~= 2 or not v[2] or not v[3] or v[4] ~= lim.per then
      -- Absent, written by another algorithm, or counted on the grid of
      -- another window length: start afresh.
      return s
    end
    local stored = v[2]
    if stored >= w then
      -- Same window, or the clock went back: keep the stored window.
      s.window, s.count, s.kept = stored, v[3], true
    end
    return s
  end,

  fits = function(s, lim, cost)
    return s.count + cost <= lim.rate
  end,

  take = function(s, lim, cost)
    s.count = s.count + cost
  end,

  -- Microseconds from s.now to the end of the stored window.
  left = function(s, lim)
    if s.cal then
      local l = s.window + s.p - s.now
      if l < 1 then l = 1 end
      return l
    end
    return (s.window - s.w) * lim.per + lim.per - math.fmod(s.now, lim.per)
  end,

  report = function(s, lim, cost, allowed)
    local left = ALGORITHMS[2].left(s, lim)
    local retry = 0
    if not allowed then
      retry = left
      if retry < 1 then retry = 1 end
    end
    local reset = 0
    if s.count > 0 then reset = left end
    local remaining = lim.rate - s.count
    if remaining < 0 then remaining = 0 end
    return remaining, retry, reset, math.max(s.count - lim.rate, 0)
  end,

  save = function(key, s, lim, keep_ttl)
    if s.count <= 0 then
      redis.call('DEL', key)
      return
    end
    if s.stale then redis.call('DEL', key) end
    local p = lim.per
    if s.cal then p = s.p end
    redis.call('HSET', key, 'a', 2, 'w', s.window, 'n', s.count, 'p', p)
    if not keep_ttl then expire_us(key, ALGORITHMS[2].left(s, lim)) end
  end,

  give = function(s, lim, cost)
    if not s.kept or s.count <= 0 then return false end
    s.count = s.count - cost
    if s.count < 0 then s.count = 0 end
    return true
  end,

  -- The window holding the time at (µs): its number, or for a calendar
  -- window its start; nil when at is in neither the caller's current
  -- window nor the next (an earlier one).
  window_of = function(s, lim, at)
    if not s.cal then return fdiv(at, lim.per) end
    if at >= lim.cs and at < lim.ce then return lim.cs end
    if at >= lim.ce and at < lim.cn then return lim.ce end
    return nil
  end,

  -- A charge counts in the current window even past rate (debt until
  -- the window ends). A refund comes off the window still current, and
  -- when the reservation's time at is known (> 0) only if that is the
  -- window holding at.
  settle = function(s, lim, delta, at)
    if delta < 0 then
      if at and at > 0 then
        if at > s.now then at = s.now end
        if ALGORITHMS[2].window_of(s, lim, at) ~= s.window then return false end
      end
      return ALGORITHMS[2].give(s, lim, -delta)
    end
    local c = s.count + delta
    if c > MAX_EXACT then c = MAX_EXACT end
    s.count, s.kept = c, true -- the window now holds a count to refund from
    return true
  end,
}

-- lua/slidingwindow.lua
-- Sliding window in buckets (see slidingwindow.go for the bound and its
-- proof). lim.burst carries the number of buckets N: a window's burst is
-- always 0, so the Go side sends N in its place. Buckets are L = ceil(per/N)
-- µs long, aligned on the Unix epoch; an item fits in bucket k when buckets
-- k-N .. k hold at most rate - cost units.
--
-- Hash fields: a = algorithm (3), p = per (µs), n = N, w = the newest
-- bucket k, b = the counts of the buckets ending at w, oldest first, comma
-- separated, without leading zeros.
-- s.k is the newest bucket (the stored one when the clock went back behind
-- it); s.c[1 .. N+1] the counts of buckets k-N .. k.

ALGORITHMS[3] = {
  load = function(key, lim, now)
    local P, N = lim.per, lim.burst
    local L = cdiv(P, N)
    local k = fdiv(now, L)
    local s = {now = now, k = k, L = L, c = {}, stored = false}
    for i = 1, N + 1 do s.c[i] = 0 end
    local v = {}
    if key then v = redis.call('HMGET', key, 'a', 'p', 'n', 'w', 'b') end
    local a = tonumber(v[1])
    s.stale = a ~= nil and (a ~= 3 or v[3] == nil)
    if a ~= 3 or tonumber(v[2]) ~= P or tonumber(v[3]) ~= N or not v[4] or not v[5] then
      -- Absent, written by another algorithm or format, or counted on the
      -- grid of another window length or bucket count: start afresh.
      return s
    end
    s.stored = true
    local w = tonumber(v[4])
    if w > k then k = w; s.k = w end
    local counts = {}
    for x in string.gmatch(v[5], '[^,]+') do counts[#counts + 1] = tonumber(x) end
    local first = w - #counts + 1
    for i = 1, #counts do
      local j = first + i - 1 - (k - N)
      if j >= 0 then s.c[j + 1] = counts[i] end
    end
    return s
  end,

  sum = function(s)
    local t = 0
    for i = 1, #s.c do t = t + s.c[i] end
    return t
  end,

  fits = function(s, lim, cost)
    return ALGORITHMS[3].sum(s) + cost <= lim.rate
  end,

  take = function(s, lim, cost)
    local N = lim.burst
    s.c[N + 1] = s.c[N + 1] + cost
  end,

  -- µs from s.now until every counted bucket has left the window, 0 when
  -- nothing is counted: bucket k-N+i leaves when bucket k+i+1 begins.
  left = function(s, lim)
    for i = #s.c, 1, -1 do
      if s.c[i] > 0 then return (s.k + i) * s.L - s.now end
    end
    return 0
  end,

  report = function(s, lim, cost, allowed)
    local R = lim.rate
    local sum = ALGORITHMS[3].sum(s)
    local remaining = R - sum
    if remaining < 0 then remaining = 0 end
    if remaining > R then remaining = R end
    local retry = 0
    if not allowed then
      -- The first bucket boundary at which enough old buckets have left.
      local j, rest = 1, sum - s.c[1]
      while rest + cost > R do
        rest = rest - s.c[j + 1]
        j = j + 1
      end
      retry = (s.k + j) * s.L - s.now
    end
    return remaining, retry, ALGORITHMS[3].left(s, lim), math.max(sum - R, 0)
  end,

  save = function(key, s, lim, keep_ttl)
    local first = 0
    for i = 1, #s.c do
      if s.c[i] > 0 then first = i; break end
    end
    if first == 0 then
      redis.call('DEL', key)
      return
    end
    if s.stale then redis.call('DEL', key) end
    local out = {}
    for i = first, #s.c do out[#out + 1] = string.format('%d', s.c[i]) end
    redis.call('HSET', key, 'a', 3, 'p', lim.per, 'n', lim.burst, 'w', s.k, 'b', table.concat(out, ','))
    if not keep_ttl then expire_us(key, ALGORITHMS[3].left(s, lim)) end
  end,

  -- Refund: the cost comes off the buckets, newest first, never below 0.
  give = function(s, lim, cost)
    if not s.stored then return false end
    for i = #s.c, 1, -1 do
      if cost <= 0 then break end
      local t = s.c[i]
      if t > cost then t = cost end
      s.c[i] = s.c[i] - t
      cost = cost - t
    end
    return true
  end,

  -- A charge lands in the current bucket even past rate. A refund comes
  -- off the bucket holding the reservation's time at while that bucket is
  -- in the window, or when at is unknown (0) off the buckets newest first.
  settle = function(s, lim, delta, at)
    if delta < 0 and at and at > 0 then
      if at > s.now then at = s.now end
      local j = fdiv(at, s.L) - (s.k - lim.burst) + 1
      if not s.stored or j < 1 or j > #s.c or s.c[j] <= 0 then return false end
      local t = -delta
      if t > s.c[j] then t = s.c[j] end
      s.c[j] = s.c[j] - t
      return true
    end
    if delta < 0 then return ALGORITHMS[3].give(s, lim, -delta) end
    local sum = ALGORITHMS[3].sum(s)
    if sum + delta > MAX_EXACT then delta = MAX_EXACT - sum end
    if delta <= 0 then return false end
    s.c[#s.c] = s.c[#s.c] + delta
    s.stored = true -- there are counts to refund from
    return true
  end,
}

-- lua/slidinglog.lua
-- Sliding log. Hash fields: a = algorithm (4), p = per (µs), e = the
-- entries, oldest first, as a MessagePack array at1, cost1, at2, cost2, ...
-- (at in µs). At most MaxSlidingLogRate entries are kept (each costs >= 1).

ALGORITHMS[4] = {
  load = function(key, lim, now)
    -- s.now is max(now, newest admission); s.real is now.
    local s = {now = now, real = now, at = {}, cost = {}, used = 0}
    local v = {false, false}
    if key then v = redis.call('HMGET', key, 'a', 'e') end
    s.stale = v[1] ~= false and v[1] ~= '4'
    if v[1] ~= '4' or not v[2] then return s end
    local flat = {cmsgpack.unpack(v[2])}
    if type(flat[1]) == 'table' then flat = flat[1] end
    local n = #flat
    if n >= 2 and flat[n - 1] > now then
      s.now = flat[n - 1] -- the clock went back: no capacity
    end
    local horizon = s.now - lim.per
    for i = 1, n - 1, 2 do
      if flat[i] > horizon then
        s.at[#s.at + 1] = flat[i]
        s.cost[#s.cost + 1] = flat[i + 1]
        s.used = s.used + flat[i + 1]
      end
    end
    return s
  end,

  fits = function(s, lim, cost)
    return s.used + cost <= lim.rate
  end,

  take = function(s, lim, cost)
    s.at[#s.at + 1] = s.now
    s.cost[#s.cost + 1] = cost
    s.used = s.used + cost
  end,

  report = function(s, lim, cost, allowed)
    local n = #s.at
    local remaining = lim.rate - s.used
    if remaining < 0 then remaining = 0 end
    local retry = 0
    if not allowed then
      local needed = s.used + cost - lim.rate
      local freed, i = 0, 0
      while i < n and freed < needed do
        i = i + 1
        freed = freed + s.cost[i]
      end
      if i == 0 then
        retry = lim.per -- unreachable for a valid item (cost <= rate)
      else
        retry = s.at[i] + lim.per - s.now
      end
      if retry < 1 then retry = 1 end
    end
    local reset = 0
    if n > 0 then reset = s.at[n] + lim.per - s.now end
    return remaining, retry, reset, math.max(s.used - lim.rate, 0)
  end,

  save = function(key, s, lim, keep_ttl)
    local n = #s.at
    if n == 0 then
      redis.call('DEL', key)
      return
    end
    local flat = {}
    for i = 1, n do
      flat[2 * i - 1] = s.at[i]
      flat[2 * i] = s.cost[i]
    end
    if s.stale then redis.call('DEL', key) end
    redis.call('HSET', key, 'a', 4, 'p', lim.per, 'e', cmsgpack.pack(flat))
    if not keep_ttl then expire_us(key, s.at[n] + lim.per - s.real) end
  end,

  give = function(s, lim, cost)
    for i = #s.at, 1, -1 do
      if s.cost[i] == cost then
        s.used = s.used - cost
        table.remove(s.at, i)
        table.remove(s.cost, i)
        return true
      end
    end
    return false
  end,

  -- A charge is an entry at s.now, even past rate; a refund comes off the
  -- entries stamped with the reservation's time at (all entries when at
  -- is unknown, 0), newest first, removing those that reach 0.
  settle = function(s, lim, delta, at)
    if delta > 0 then
      if s.used + delta > MAX_EXACT then delta = MAX_EXACT - s.used end
      if delta <= 0 then return false end
      ALGORITHMS[4].take(s, lim, delta)
      return true
    end
    if at and at > s.real then at = s.real end
    local u, changed = -delta, false
    for i = #s.at, 1, -1 do
      if u <= 0 then break end
      if not (at and at > 0) or s.at[i] == at then
        local t = s.cost[i]
        if t > u then t = u end
        s.cost[i] = s.cost[i] - t
        s.used = s.used - t
        u = u - t
        changed = true
        if s.cost[i] == 0 then
          table.remove(s.at, i)
          table.remove(s.cost, i)
        end
      end
    end
    return changed
  end,
}

-- lua/concurrency.lua
-- Concurrency. The key is a sorted set: one member per slot held, named by
-- its holder, scored by the time (µs) from which it is free unless renewed.
-- lim.rate is the most slots held at once (Limit.Max), lim.per the time a
-- slot lives without a renewal, lim.holder the item's holder.
--
-- Expired members are ignored when counting and removed whenever a slot is
-- taken. A key of another type (another algorithm's hash) reads as empty
-- and is replaced when a slot is taken. The live slots are counted only
-- when a decision needs them: a release reads the key's type and removes
-- its holder, nothing more.

-- The exclusive lower score bound "(now", written exactly (tostring would
-- round a 16-digit number).
local function after(now)
  return '(' .. string.format('%.0f', now)
end

local function zset_type(key)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  return t
end

-- Counts the live slots of the key load found (once): s.n, and the
-- earliest and latest expiry s.first and s.last.
local function count(s)
  local key = s.uncounted
  if not key then return end
  s.uncounted = nil
  s.n = redis.call('ZCOUNT', key, after(s.now), '+inf')
  if s.n > 0 then
    local f = redis.call('ZRANGEBYSCORE', key, after(s.now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local l = redis.call('ZREVRANGEBYSCORE', key, '+inf', after(s.now), 'WITHSCORES', 'LIMIT', 0, 1)
    s.first, s.last = tonumber(f[2]), tonumber(l[2])
  end
end

ALGORITHMS[5] = {
  load = function(key, lim, now)
    local s = {now = now, n = 0, add = {}, rem = {}}
    if not key then return s end
    local t = zset_type(key)
    if t == 'none' then
      s.absent = true
      return s
    end
    if t ~= 'zset' then
      s.stale = true
      return s
    end
    s.uncounted = key
    return s
  end,

  fits = function(s, lim, cost)
    count(s)
    return s.n + cost <= lim.rate
  end,

  take = function(s, lim, cost)
    count(s)
    local e = s.now + lim.per
    s.add[#s.add + 1] = {lim.holder, e}
    s.n = s.n + cost
    if not s.first or e < s.first then s.first = e end
    if not s.last or e > s.last then s.last = e end
  end,

  report = function(s, lim, cost, allowed)
    count(s)
    local remaining = lim.rate - s.n
    if remaining < 0 then remaining = 0 end
    local retry = 0
    if not allowed then
      retry = (s.first or s.now) - s.now
      if retry < 1 then retry = 1 end
    end
    local reset = 0
    if s.last then reset = s.last - s.now end
    return remaining, retry, reset
  end,

  save = function(key, s, lim, keep_ttl)
    if s.stale then redis.call('DEL', key) end
    -- Expired members go when slots are taken (the key was counted); a
    -- release leaves them to the next decision or the key's expiry.
    if not s.uncounted and not s.absent then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', s.now))
    end
    for _, h in ipairs(s.rem) do redis.call('ZREM', key, h) end
    for _, a in ipairs(s.add) do redis.call('ZADD', key, a[2], a[1]) end
    if not keep_ttl and s.last then expire_us(key, s.last - s.now) end
  end,

  -- Refunding a slot is releasing it: its holder's member goes (from a
  -- key that holds slots).
  give = function(s, lim, cost)
    if s.stale or s.absent then return false end
    s.rem[#s.rem + 1] = lim.holder
    return true
  end,

  -- Renews the holder's slot to now + per when it is still live, and makes
  -- the key live at least as long. Returns 1 when renewed, 0 otherwise.
  renew = function(key, lim, now)
    if zset_type(key) ~= 'zset' then return 0 end
    local sc = redis.call('ZSCORE', key, lim.holder)
    if not sc or tonumber(sc) <= now then return 0 end
    redis.call('ZADD', key, 'XX', now + lim.per, lim.holder)
    local ms = cdiv(lim.per, 1000)
    if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
    return 1
  end,
}

-- lua/dispatch.lua
local function decide(KEYS, ARGV)
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
-- it, to now + per. Reply: per item, 1 when renewed, 0 when its holder no
-- longer held it (or the item is not a concurrency item).
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
  local alg = ALGORITHMS[tonumber(ARGV[b + 1])]
  if not alg then return redis.error_reply('ERR unknown algorithm ' .. tostring(ARGV[b + 1])) end
  items[i] = {
    alg = alg,
    lim = {rate = tonumber(ARGV[b + 2]), per = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]),
           cs = tonumber(ARGV[b + 8]), ce = tonumber(ARGV[b + 9]), cn = tonumber(ARGV[b + 10]),
           holder = ARGV[b + 11]},
    cost = tonumber(ARGV[b + 5]),
    shadow = ARGV[b + 6] == '1',
    want = tonumber(ARGV[b + 7]) or 0,
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

local admitted = 1
local values = {}
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
  values[i] = {a, rem0, retry, reset0, rem1, reset1, taken, debt or 0}
end
if mode ~= 'd' then admitted = 0 end

if admitted == 1 then
  for _, key in ipairs(order) do
    local w = work[key]
    if w.dirty then w.alg.save(key, w.s, w.lim, false) end
  end
end

local reply = {admitted}
for i = 1, n do
  local v = values[i]
  local rem, reset, taken = v[2], v[4], 0
  if admitted == 1 then rem, reset, taken = v[5], v[6], v[7] end
  reply[#reply + 1] = v[1]
  reply[#reply + 1] = rem
  reply[#reply + 1] = v[3]
  reply[#reply + 1] = reset
  reply[#reply + 1] = v[2]
  reply[#reply + 1] = v[4]
  reply[#reply + 1] = taken
  reply[#reply + 1] = v[8]
end
reply[#reply + 1] = now
return reply

end
redis.register_function{function_name = 'quotagate_b1116abf5878', callback = decide}
