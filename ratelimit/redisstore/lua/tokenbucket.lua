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
    s.same = per == lim.per -- a and p hold what save would write
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
    if s.same then
      -- Only the level and the stamp change; a and p stay as they are.
      redis.call('HSET', key, 'l', int_text(s.level), 's', int_text(s.stamp))
    else
      if s.stale then redis.call('DEL', key) end
      redis.call('HSET', key, 'a', '1', 'l', int_text(s.level), 's', int_text(s.stamp), 'p', int_text(lim.per))
    end
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
