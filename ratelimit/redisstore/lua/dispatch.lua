-- Entry point. One call decides, evaluates, refunds or settles one group
-- of keys that share a hash slot, atomically. This file is the body of
-- the function decide(KEYS, ARGV) (the Go side wraps it), which the
-- function library registers and the EVALSHA script calls.
--
-- KEYS[i]: the key of item i (a key may appear more than once). To settle,
--          the last key is the settlement's marker, not an item.
-- ARGV[1]: 'd' to decide, 'e' to evaluate without consuming, 'r' to refund,
--          'w' to renew concurrency slots, 's' to settle; 'D', 'E' and
--          'S' are 'd', 'e' and 's' with wants; 'c' is 'd' with the short
--          reply (see below).
-- ARGV[2]: now in µs since the Unix epoch, or '' to use the server clock.
-- ARGV[2 + i]: the spec of item i (see items.lua).
-- ARGV[2 + n + i], for n items, with wants: item i's want, the units to
--            reserve (to settle: the reservation's time in µs, 0 when
--            unknown), a decimal integer below 2^53. Without wants every
--            want is 0.
-- ARGV[2 + n + w + i], where w is n with wants and 0 without, when
--            present (never to settle): the holder of item i's
--            concurrency slot ('' for other items).
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
-- retry_us, reset_us, debt; then now; then per item: remaining_before,
-- reset_before_us, taken}, all integers below 2^53. When admitted,
-- remaining and reset_us count the units the item took; otherwise they do
-- not. debt is the units the key owes beyond empty after a settlement (a
-- decision never changes it). now is the time (µs) the call decided at.
-- remaining_before and reset_before_us never count the units taken (they
-- are what to report if the group is refunded later). taken is the units
-- the item consumed: 0 unless the group was admitted and the item fitted.
-- The short reply ('c') ends at now: a caller that will neither refund the
-- group nor read what it reserved needs nothing after it, and each value
-- left out is one Redis need not write nor the caller read.
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
-- reservation made at its want charged (see the algorithms' settle), and
-- sets each changed key's expiry from its new state, unless the marker key
-- exists: then it changes nothing. It creates the marker with a time to
-- live of ARGV[3 + n + w] ms, for n items. Reply: {1} when applied, {0} when
-- the marker existed (already settled). Concurrency items are never
-- settled.

if not rcall then rcall = redis.call end
local now, now_text = nil, ARGV[2]
if now_text == '' then
  -- TIME replies seconds and microseconds, the latter without leading
  -- zeros. Its two texts are converted by arithmetic, which is cheaper
  -- than converting the one of 16 digits (tonumber converts it twice).
  local t = rcall('TIME')
  local sec, us = t[1], t[2]
  now_text = sec .. ZEROS[#us] .. us
  now = sec * 1000000 + us
else
  now = tonumber(now_text)
end
call_now, call_now_text = now, now_text
-- The modes with wants, compared in place: a table or a function for
-- them would be made again on every call of an EVALSHA script.
local mode, with_wants, short = ARGV[1], true, false
if mode == 'c' then
  mode, with_wants, short = 'd', false, true
elseif mode == 'D' then
  mode = 'd'
elseif mode == 'S' then
  mode = 's'
elseif mode == 'E' then
  mode = 'e'
else
  with_wants = false
  if mode ~= 'd' and mode ~= 'e' and mode ~= 'r' and mode ~= 'w' and mode ~= 's' then
    return redis.error_reply('ERR quotagate: mode must be one of c, d, e, r, s, w (D, E, S with wants), got ' .. string.format('%q', tostring(mode)))
  end
end

local n = #KEYS
if mode == 's' then n = n - 1 end
local w = 0 -- the wants' arguments
if with_wants then w = n end
-- One token bucket decided alone, the usual call: see bucketalone.lua.
if n == 1 and mode == 'd' and not with_wants and ARGV[4] == nil and BUCKET_ALONE then
  local it = item_cache[ARGV[3]]
  if it and it.alg == ALGORITHMS[1] then return decide_bucket_alone(KEYS, it, now, short) end
end
local keep = mode ~= 's' -- see items.lua
local holders = keep and ARGV[2 + n + w + 1] ~= nil
local items, wants = call_items, call_wants -- see state.lua
for i = 1, n do
  local it, err = item_of(ARGV[2 + i], keep, i)
  if not it then return err end
  if it.alg.holds then it = held_by(it, holders and ARGV[2 + n + w + i] or '', i) end
  items[i] = it
  if with_wants then
    -- A decimal integer below 2^53.
    local t = ARGV[2 + n + i]
    if not t or not string.find(t, '^%d+$') then return field_error(i, 'want', 'must be a non-negative integer') end
    local v = t + 0
    if v >= MAX_EXACT then return field_error(i, 'want', 'must be below 2^53') end
    wants[i] = v
  else
    wants[i] = 0
  end
end

if mode == 'w' then
  local renewed = {}
  for i = 1, n do
    local it = items[i]
    renewed[i] = it.alg.renew and it.alg.renew(KEYS[i], it.lim, now) or 0
  end
  return renewed
end

if mode == 'r' then return adjust(KEYS, items, wants, n, now, refund_item, true) end

if mode == 's' then
  local ttl = tonumber(ARGV[3 + n + w])
  if not ttl or ttl < 1 then return redis.error_reply('ERR bad settlement marker ttl') end
  if not rcall('SET', KEYS[n + 1], '1', 'NX', 'PX', ttl) then return {0} end
  return adjust(KEYS, items, wants, n, now, settle_item, false)
end

return decide_items(KEYS, items, wants, n, now, mode == 'd', short)
