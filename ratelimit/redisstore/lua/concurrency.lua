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
  local t = rcall('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  return t
end

-- Counts the live slots of the key load found (once): s.n, and the
-- latest expiry s.last. The earliest, which only a denial reports, is
-- read by earliest when one needs it.
local function count(s)
  local key = s.uncounted
  if not key then return end
  s.uncounted = nil
  s.n = rcall('ZCOUNT', key, after(s.now), '+inf')
  if s.n > 0 then
    local l = rcall('ZREVRANGEBYSCORE', key, '+inf', after(s.now), 'WITHSCORES', 'LIMIT', 0, 1)
    s.last = tonumber(l[2])
    s.stored_first = key
  end
end

-- The earliest expiry of the live slots: the stored ones' (read once) and
-- those taken in this call (s.first until then), or nil when none.
local function earliest(s)
  local key = s.stored_first
  if key then
    s.stored_first = nil
    local f = rcall('ZRANGEBYSCORE', key, after(s.now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local e = tonumber(f[2])
    if not s.first or e < s.first then s.first = e end
  end
  return s.first
end

ALGORITHMS[5] = {
  holds = true, -- items name their holder in lim.holder
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
      retry = (earliest(s) or s.now) - s.now
      if retry < 1 then retry = 1 end
    end
    local reset = 0
    if s.last then reset = s.last - s.now end
    return remaining, retry, reset
  end,

  save = function(key, s, lim, keep_ttl)
    if s.stale then rcall('DEL', key) end
    -- Expired members go when slots are taken (the key was counted); a
    -- release leaves them to the next decision or the key's expiry.
    if not s.uncounted and not s.absent then
      rcall('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', s.now))
    end
    for _, h in ipairs(s.rem) do rcall('ZREM', key, h) end
    for _, a in ipairs(s.add) do rcall('ZADD', key, a[2], a[1]) end
    if not keep_ttl and s.last then expire_us(key, s.last - s.now, lim.ttl_memo) end
  end,

  -- Refunding a slot is releasing it: its holder's member goes (from a
  -- key that holds slots).
  give = function(s, lim, cost)
    if s.stale or s.absent then return false end
    s.rem[#s.rem + 1] = lim.holder
    return true
  end,

  -- Renews the holder's slot to now + per when it is still live, and makes
  -- the key live at least as long. A holder whose slot is gone (expired,
  -- or its member or key removed) takes it back when the set, without its
  -- expired members, holds fewer than lim.rate live slots. Returns 1 when
  -- renewed, 2 when taken back, 0 when lost (the set is full, or the key
  -- holds another algorithm's state, which a renewal never replaces).
  renew = function(key, lim, now)
    local t = zset_type(key)
    local r = 2
    if t == 'zset' then
      local sc = rcall('ZSCORE', key, lim.holder)
      if sc and tonumber(sc) > now then
        r = 1
      else
        rcall('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
        if rcall('ZCARD', key) >= lim.rate then return 0 end
      end
    elseif t ~= 'none' then
      return 0
    end
    rcall('ZADD', key, now + lim.per, lim.holder)
    local ms = cdiv(lim.per, 1000)
    if rcall('PTTL', key) < ms then rcall('PEXPIRE', key, ms) end
    return r
  end,
}
