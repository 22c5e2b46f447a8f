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
    local into = now % lim.per
    local w = (now - into) / lim.per
    local s = {now = now, w = w, window = w, count = 0, kept = false, stale = false, same = false}
    if not key then return s end
    local v = rcall('HMGET', key, 'a', 'w', 'n', 'p')
    -- Every version writes a as '2' and p as per's integer text, so that
    -- the usual state is recognised without parsing them.
    local a = v[1]
    if a ~= '2' then
      a = a and tonumber(a) -- false when absent, nil when not a number
      if a then s.stale = a ~= 2 end
      if a ~= 2 then return s end
    end
    local p = v[4]
    local stored, count = v[2] and tonumber(v[2]), v[3] and tonumber(v[3])
    if not stored or not count or p ~= lim.per_text and not (p and tonumber(p) == lim.per) then
      -- Absent, written by another algorithm, or counted on the grid of
      -- another window length: start afresh.
      return s
    end
    if stored >= w then
      -- Same window, or the clock went back: keep the stored window, whose
      -- a, w and p are what save would write.
      s.window, s.count, s.kept, s.same = stored, count, true, true
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
    return (s.window - s.w) * lim.per + lim.per - s.now % lim.per
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
      rcall('DEL', key)
      return
    end
    if s.same then
      rcall('HSET', key, 'n', memo_text(s.count, lim.value_memo))
    else
      if s.stale then rcall('DEL', key) end
      local p = lim.per_text
      if s.cal then p = int_text(s.p) end
      rcall('HSET', key, 'a', '2', 'w', memo_text(s.window, lim.window_memo), 'n', memo_text(s.count, lim.value_memo), 'p', p)
    end
    if not keep_ttl then expire_us(key, ALGORITHMS[2].left(s, lim), lim.ttl_memo) end
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
