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
    if key then v = rcall('HMGET', key, 'a', 'p', 'n', 'w', 'b') end
    -- Every version writes a, p and n as integer text, so that the usual
    -- state is recognised without parsing them.
    local a = v[1]
    if a == '3' then a = 3 else a = tonumber(a) end
    s.stale = a ~= nil and (a ~= 3 or v[3] == nil)
    if a ~= 3 or v[2] ~= lim.per_text and tonumber(v[2]) ~= P or v[3] ~= lim.burst_text and tonumber(v[3]) ~= N
      or not v[4] or not v[5] then
      -- Absent, written by another algorithm or format, or counted on the
      -- grid of another window length or bucket count: start afresh.
      return s
    end
    s.stored = true
    local w = tonumber(v[4])
    if w > k then k = w; s.k = w end
    local counts = {}
    -- The counts are decimal integers, which arithmetic converts (x + 0)
    -- without a call of tonumber.
    for x in string.gmatch(v[5], '[^,]+') do counts[#counts + 1] = x + 0 end
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
      rcall('DEL', key)
      return
    end
    if s.stale then rcall('DEL', key) end
    -- table.concat writes a number with %.14g, which is its integer text
    -- below 10^14; a larger count is formatted first.
    local out, big = {}, false
    for i = first, #s.c do
      local c = s.c[i]
      out[#out + 1] = c
      if c >= 1e14 then big = true end
    end
    if big then
      for i = 1, #out do out[i] = int_text(out[i]) end
    end
    rcall('HSET', key, 'a', '3', 'p', lim.per_text, 'n', lim.burst_text, 'w', memo_text(s.k, lim.window_memo),
      'b', table.concat(out, ','))
    if not keep_ttl then expire_us(key, ALGORITHMS[3].left(s, lim), lim.ttl_memo) end
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
