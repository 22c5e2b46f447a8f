-- Token bucket. Hash fields: a = algorithm (1), l = level (tokens * per),
-- s = stamp (µs), p = per (µs) the level is scaled by.

ALGORITHMS[1] = {
  -- v, when set, is the key's HMGET of a, l, s and p, read already.
  load = function(key, lim, now, v)
    local cap = lim.cap
    local s = {cap = cap, now = now, level = cap, stamp = now, stale = false, same = false}
    if not key then return s end
    if not v then v = rcall('HMGET', key, 'a', 'l', 's', 'p') end
    -- Every version writes a as '1' and p as per's integer text, so that
    -- the usual state is recognised without parsing them.
    local a = v[1]
    if a ~= '1' then
      a = a and tonumber(a) -- false when absent, nil when not a number
      if a then s.stale = a ~= 1 end
      if a ~= 1 then return s end -- absent (or another algorithm's): full
    end
    local per = v[4]
    if per == lim.per_text then
      per = lim.per
    else
      per = per and tonumber(per)
    end
    local level, stamp = v[2] and tonumber(v[2]), v[3] and tonumber(v[3])
    if not level or not stamp or not per or per <= 0 then return s end
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
    -- Full once elapsed reaches ceil((cap - level) / rate). The divisions
    -- here and in report are written out: they run on every decision, and
    -- a Lua function call costs as much as some 7 of the VM's instructions.
    local rate, need = lim.rate, cap - level
    if need <= 0 then
      level = cap
    else
      local r = need % rate
      local until_full = (need - r) / rate
      if r > 0 then until_full = until_full + 1 end
      if elapsed >= until_full then
        level = cap
      else
        level = level + elapsed * rate
      end
    end
    s.level, s.stamp = level, stamp
    return s
  end,

  -- judge (see state.lua) in one function: fits, report, take and report
  -- again would be a call of a Lua function each.
  judge = function(it, s, reply, o, e, want)
    local lim, cost = it.lim, it.cost
    local per, rate, level = lim.per, lim.rate, s.level
    local allowed = level >= cost * per
    local avail, retry, reset, debt = 0, 0, 0, 0
    if not allowed then retry = cdiv(cost * per - level, rate) end
    if level > 0 then
      avail = (level - level % per) / per
    elseif level < 0 then
      debt = cdiv(-level, per)
    end
    local need = s.cap - level
    if need > 0 then
      local r = need % rate
      reset = (need - r) / rate
      if r > 0 then reset = reset + 1 end
    end
    local a, rem1, reset1, taken = 0, avail, reset, 0
    if allowed then
      a = 1
      if cost > 0 then
        -- A reservation takes what the bucket holds, up to want, never
        -- less than cost (which fits: avail >= cost).
        taken = cost
        if want > cost then
          taken = avail
          if taken > want then taken = want end
          if taken < cost then taken = cost end
        end
        level = level - taken * per
        s.level = level
        rem1 = avail - taken -- level stays >= 0 and drops by whole units
        need = s.cap - level
        local r = need % rate
        reset1 = (need - r) / rate
        if r > 0 then reset1 = reset1 + 1 end
      end
    end
    reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4], reply[o + 5] = a, rem1, retry, reset1, debt
    reply[e + 1], reply[e + 2], reply[e + 3] = avail, reset, taken
    return allowed, taken
  end,

  save = function(key, s, lim, keep_ttl)
    if s.level >= s.cap then
      rcall('DEL', key) -- a full bucket is the same as an absent one
      return
    end
    if s.same then
      -- Only the level and the stamp change; a and p stay as they are.
      rcall('HSET', key, 'l', memo_text(s.level, lim.value_memo), 's', time_text(s.stamp))
    else
      if s.stale then rcall('DEL', key) end
      rcall('HSET', key, 'a', '1', 'l', memo_text(s.level, lim.value_memo), 's', time_text(s.stamp), 'p', lim.per_text)
    end
    -- Full again reset µs after the stamp, which is ahead of now when the
    -- clock went back.
    local ahead = s.stamp - s.now
    if ahead < 0 then ahead = 0 end
    if not keep_ttl then expire_us(key, cdiv(s.cap - s.level, lim.rate) + ahead, lim.ttl_memo) end
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
