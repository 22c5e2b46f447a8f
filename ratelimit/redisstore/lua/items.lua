-- Items. Each item of a call comes as one text, its spec: ten integers
-- separated by commas,
--
--   algorithm,rate,per,burst,cost,shadow,want,cs,ce,cn
--
-- rate is, for concurrency, the most slots held at once; per is in µs;
-- shadow is 1 or 0; want is the units to reserve (to settle: the
-- reservation's time in µs, 0 when unknown); cs, ce and cn are, for a
-- calendar fixed window, the start and end of the current window by the
-- caller's clock and the end of the next one (µs; all 0 otherwise).
--
-- The texts repeat from call to call (a policy's limit and cost), so an
-- item is parsed once per distinct text and kept in a table that the
-- function library keeps between calls (an EVALSHA script starts it empty
-- each call). The table is emptied when it holds 4096 texts, so it stays
-- small whatever the callers send. A settlement's texts are never kept:
-- its cost is the request's own delta and its want the reservation's
-- time, so each text is new, and keeping it would only push out the texts
-- that repeat.
--
-- An item is {alg, lim, cost, shadow, want}, never changed once parsed
-- but for the memos: lim holds rate, per, burst, per_text and burst_text
-- (their texts as the spec gives them), cap (burst * per), three
-- memo_text memos of the limit's own (value_memo for a token bucket's
-- level or a window's count, window_memo for a window's or bucket's
-- number, ttl_memo for expire_us), and for a calendar window cs, ce and
-- cn.
local item_cache, items_cached = {}, 0

-- A spec's ten integers; only cost (a settlement's delta) may be
-- negative.
local SPEC = '^(%d+),(%d+),(%d+),(%d+),(%-?%d+),([01]),(%d+),(%d+),(%d+),(%d+)$'

-- The item of spec, or nil and an error reply when spec is malformed,
-- kept in the table when keep is set. The pattern admits only decimal
-- digits, so arithmetic converts the captured texts (x + 0) without a call
-- of tonumber for each.
local function parse_item(spec, keep)
  local a, rate, per, burst, cost, shadow, want, cs, ce, cn = string.match(spec, SPEC)
  if not a then return nil, redis.error_reply('ERR malformed item ' .. spec) end
  local alg = ALGORITHMS[a + 0]
  if not alg then return nil, redis.error_reply('ERR unknown algorithm ' .. a) end
  local lim = {rate = rate + 0, per = per + 0, burst = burst + 0, per_text = per, burst_text = burst, cap = burst * per,
               value_memo = {text_of = false, text = ''}, ttl_memo = {text_of = false, text = ''},
               window_memo = {text_of = false, text = ''}}
  if ce ~= '0' then lim.cs, lim.ce, lim.cn = cs + 0, ce + 0, cn + 0 end
  local it = {alg = alg, lim = lim, cost = cost + 0, shadow = shadow == '1', want = want + 0}
  if not keep then return it end
  if items_cached >= 4096 then item_cache, items_cached = {}, 0 end
  item_cache[spec], items_cached = it, items_cached + 1
  return it
end

-- The item of spec (see parse_item); keep is false for a settlement.
local function item_of(spec, keep)
  local it = item_cache[spec]
  if it then return it end
  return parse_item(spec, keep)
end

-- The item it for the holder of a concurrency slot: a copy whose lim
-- names the holder (the parsed item is shared between calls and holders).
local function held_by(it, holder)
  local l = it.lim
  return {alg = it.alg, lim = {rate = l.rate, per = l.per, burst = l.burst, per_text = l.per_text, burst_text = l.burst_text, cap = l.cap,
                               value_memo = l.value_memo, ttl_memo = l.ttl_memo, window_memo = l.window_memo,
                               holder = holder},
          cost = it.cost, shadow = it.shadow, want = it.want}
end
