-- The owner of cross-region keys (package regional): one report of one
-- region for one key, answered with the region's grant. The computation
-- is Allocate's (allocate.go), step for step.
--
-- KEYS[1] the epoch key (the time the owner first saw a report, µs)
-- KEYS[2] the key's state: hash with 'rate', 'burst', 'per' (capacity)
--         and one field 'r:' .. region = "rate burst expires demand
--         admitted held_rate held_burst held_expires"
-- ARGV    region, rate, burst, per, ttl (µs), demand, admitted,
--         held rate, held burst, held remaining (µs, 0 = none)
-- Reply   {rate, burst, ttl (µs, 0 = no grant), warm (0/1)}

local function report(keys, argv)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local region = argv[1]
  local cap_rate, cap_burst = tonumber(argv[2]), tonumber(argv[3])
  local per, ttl = argv[4], tonumber(argv[5])
  local demand, admitted = tonumber(argv[6]), tonumber(argv[7])
  local held_rate, held_burst, held_left = tonumber(argv[8]), tonumber(argv[9]), tonumber(argv[10])
  if not (cap_rate and cap_burst and ttl and demand and admitted and held_rate and held_burst and held_left)
      or cap_rate < 1 or cap_burst < 1 or ttl < 1 then
    return redis.error_reply('ERR quotagate regions: malformed report')
  end

  local epoch = tonumber(redis.call('GET', keys[1]))
  if not epoch then
    epoch = now
    redis.call('SET', keys[1], tostring(now))
  end
  local warm = now < epoch + ttl

  local function clamp(x, lo, hi)
    if x < lo then return lo end
    if x > hi then return hi end
    return x
  end

  -- The other regions' claims: each counts the larger of its two grants
  -- still live (the last given, the last said held).
  local used_rate, used_burst, demands = 0, 0, {}
  local fields = redis.call('HGETALL', keys[2])
  for i = 1, #fields, 2 do
    local f = fields[i]
    if string.sub(f, 1, 2) == 'r:' and string.sub(f, 3) ~= region then
      local r, b, e, d, _, hr, hb, he =
        string.match(fields[i + 1], '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
      r, b, e, d = tonumber(r), tonumber(b), tonumber(e), tonumber(d)
      hr, hb, he = tonumber(hr), tonumber(hb), tonumber(he)
      if r then
        local cr, cb, any = 0, 0, false
        if e > now then cr, cb, any = r, b, true end
        if he > now then
          cr, cb, any = math.max(cr, hr), math.max(cb, hb), true
        end
        if any then
          used_rate = used_rate + cr
          used_burst = used_burst + cb
          demands[#demands + 1] = clamp(d, 0, cap_rate)
        end
      end
    end
  end
  local mine = clamp(demand, 0, cap_rate)
  demands[#demands + 1] = mine
  table.sort(demands)

  -- Max-min fair share of the rate, then the rest as equal headroom.
  local share, left, n = nil, cap_rate, #demands
  for i = 1, n do
    local k = n - i + 1
    if demands[i] * k > left then
      share = math.min(mine, math.floor(left / k))
      break
    end
    left = left - demands[i]
  end
  if not share then share = mine + math.floor(left / n) end

  local rate = clamp(math.min(share, cap_rate - used_rate), 0, cap_rate)
  local held_expires = now + held_left
  if held_left <= 0 then held_rate, held_burst, held_expires = 0, 0, 0 end
  if warm then rate = math.min(rate, held_rate) end
  local burst = math.floor(cap_burst * rate / cap_rate)
  if rate > 0 and burst == 0 then burst = 1 end
  burst = clamp(math.min(burst, cap_burst - used_burst), 0, cap_burst)
  local expires = now + ttl
  if warm then
    burst = math.min(burst, held_burst)
    if rate == 0 or burst == 0 then
      rate, burst, expires = 0, 0, 0
    end
  end

  redis.call('HSET', keys[2], 'rate', cap_rate, 'burst', cap_burst, 'per', per,
    'r:' .. region, string.format('%d %d %d %d %d %d %d %d', rate, burst, expires, mine,
      clamp(admitted, 0, 2^53), held_rate, held_burst, held_expires))
  -- A key no region reports for goes after two TTLs.
  redis.call('PEXPIRE', keys[2], math.floor(2 * ttl / 1000) + 1)
  local left_us = 0
  if expires > 0 then left_us = ttl end
  local w = 0
  if warm then w = 1 end
  return {rate, burst, left_us, w}
end
