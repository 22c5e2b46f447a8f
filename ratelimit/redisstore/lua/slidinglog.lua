-- Sliding log. Hash fields: a = algorithm (4), p = per (µs), e = the
-- entries, oldest first, as a MessagePack array at1, cost1, at2, cost2, ...
-- (at in µs). At most MaxSlidingLogRate entries are kept (each costs >= 1).

ALGORITHMS[4] = {
  load = function(key, lim, now)
    -- s.now is max(now, newest admission); s.real is now.
    local s = {now = now, real = now, at = {}, cost = {}, used = 0}
    local v = {false, false}
    if key then v = rcall('HMGET', key, 'a', 'e') end
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
      rcall('DEL', key)
      return
    end
    local flat = {}
    for i = 1, n do
      flat[2 * i - 1] = s.at[i]
      flat[2 * i] = s.cost[i]
    end
    if s.stale then rcall('DEL', key) end
    rcall('HSET', key, 'a', 4, 'p', lim.per, 'e', cmsgpack.pack(flat))
    if not keep_ttl then expire_us(key, s.at[n] + lim.per - s.real, lim.ttl_memo) end
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
