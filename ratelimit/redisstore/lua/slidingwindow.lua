-- Sliding window. Hash fields: a = algorithm (3), w = window number,
-- c = units in window w, v = units in window w-1, p = per (µs).
-- s.now is the real time; s.into is measured from the start of s.window
-- (0 when the clock went back behind the stored window).

ALGORITHMS[3] = {
  load = function(key, lim, now)
    local P = lim.per
    local into = math.fmod(now, P)
    local w = (now - into) / P
    local s = {now = now, w = w, window = w, into = into, cur = 0, prev = 0, stored = nil}
    local v = hget_numbers(key, 'a', 'w', 'c', 'v', 'p')
    s.stale = v[1] ~= nil and v[1] ~= 3
    if v[1] ~= 3 or not v[2] or not v[3] or not v[4] or v[5] ~= P then
      -- Absent, written by another algorithm, or counted on the grid of
      -- another window length: start afresh.
      return s
    end
    local sw, cur, prev = v[2], v[3], v[4]
    s.stored = sw
    if w == sw then
      s.cur, s.prev = cur, prev
    elseif w == sw + 1 then
      s.cur, s.prev = 0, cur
    elseif w < sw then
      -- The clock went back: keep the state and measure from the start of
      -- the stored window.
      s.window, s.into = sw, 0
      s.cur, s.prev = cur, prev
    end
    return s
  end,

  -- prev weighted by the share of the previous window still inside the
  -- sliding window, scaled by per: prev * (per - into).
  fits = function(s, lim, cost)
    local room = lim.rate - s.cur - cost
    if room < 0 then return false end
    return s.prev * (lim.per - s.into) <= room * lim.per
  end,

  take = function(s, lim, cost)
    s.cur = s.cur + cost
  end,

  report = function(s, lim, cost, allowed)
    local P, R, into = lim.per, lim.rate, s.into
    local left = P - into
    local remaining = 0
    local num = (R - s.cur) * P - s.prev * left
    if num > 0 then remaining = fdiv(num, P) end
    if remaining > R then remaining = R end
    local retry = 0
    if not allowed then
      local found = false
      if s.cur + cost <= R and s.prev > 0 then
        local d = cdiv(s.prev * left - (R - s.cur - cost) * P, s.prev)
        if d > 0 and d < left then retry, found = d, true end
      end
      if not found then
        local e = 0
        if s.cur > 0 then e = cdiv(P * (s.cur - R + cost), s.cur) end
        if e < 0 then e = 0 end
        if e > P then e = P end
        retry = left + e
      end
    end
    local reset = 0
    if s.cur > 0 then
      reset = 2 * P - into
    elseif s.prev > 0 then
      reset = left
    end
    return remaining, retry, reset
  end,

  save = function(key, s, lim, keep_ttl)
    if s.cur <= 0 and s.prev <= 0 then
      redis.call('DEL', key)
      return
    end
    if s.stale then redis.call('DEL', key) end
    redis.call('HSET', key, 'a', 3, 'w', s.window, 'c', s.cur, 'v', s.prev, 'p', lim.per)
    -- Both counts are gone at the end of the next window:
    -- (window + 2) * per - now.
    local P = lim.per
    if not keep_ttl then expire_us(key, (s.window - s.w) * P + 2 * P - math.fmod(s.now, P)) end
  end,

  give = function(s, lim, cost)
    if s.stored == nil then return false end
    if s.stored == s.window then
      s.cur = s.cur - cost
      if s.cur < 0 then s.cur = 0 end
      return true
    end
    if s.stored + 1 == s.window then
      s.prev = s.prev - cost
      if s.prev < 0 then s.prev = 0 end
      return true
    end
    return false
  end,
}
