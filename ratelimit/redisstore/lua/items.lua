-- Items. Each item of a call comes as one text, its spec: nine integers
-- separated by commas,
--
--   algorithm,rate,per,burst,cost,shadow,cs,ce,cn
--
-- rate is, for concurrency, the most slots held at once; per is in µs;
-- shadow is 1 or 0; cs, ce and cn are, for a calendar fixed window, the
-- start and end of the current window by the caller's clock and the end
-- of the next one (µs; all 0 otherwise). What an item reserves (want)
-- comes as an argument of its own (see dispatch.lua), so that the spec of
-- one policy stays the same whatever each request reserves.
--
-- The texts repeat from call to call (a policy's limit and cost), so an
-- item is parsed once per distinct text and kept in a table that the
-- function library keeps between calls (an EVALSHA script starts it empty
-- each call). The table is emptied when it holds 4096 texts, so it stays
-- small whatever the callers send. A settlement's texts are never kept:
-- its cost is the request's own delta, so each text is new, and keeping
-- it would only push out the texts that repeat.
--
-- An item is {alg, lim, cost, shadow}, never changed once parsed
-- but for the memos: lim holds rate, per, burst, per_text and burst_text
-- (their texts as the spec gives them), cap (burst * per), three
-- memo_text memos of the limit's own (value_memo for a token bucket's
-- level or a window's count, window_memo for a window's or bucket's
-- number, ttl_memo for expire_us), and for a calendar window cs, ce and
-- cn.
local item_cache, items_cached = {}, 0

-- A spec's nine integers; only cost (a settlement's delta) may be
-- negative, and its sign is captured apart from its digits.
local SPEC = '^(%d+),(%d+),(%d+),(%d+),(%-?)(%d+),([01]),(%d+),(%d+),(%d+)$'

-- The error reply for item i (its position in the call, from 1) whose
-- field breaks a rule: "ERR quotagate: item <i>: <field> <problem>".
local function field_error(i, field, problem)
  return redis.error_reply('ERR quotagate: item ' .. i .. ': ' .. field .. ' ' .. problem)
end

-- The error reply for item i whose spec does not match SPEC: the first
-- field that is not what it must be, or the count of fields. (The list
-- of fields is made here, not once with the library: an EVALSHA script
-- would make it on every call.)
local function spec_error(i, spec)
  local FIELDS = {'alg', 'rate', 'per', 'burst', 'cost', 'shadow', 'cs', 'ce', 'cn'}
  local k = 0
  for t in string.gmatch(spec .. ',', '([^,]*),') do
    k = k + 1
    local name = FIELDS[k]
    if not name then break end
    if name == 'shadow' then
      if t ~= '0' and t ~= '1' then return field_error(i, name, 'must be 0 or 1') end
    elseif name == 'cost' then
      if not string.find(t, '^%-?%d+$') then return field_error(i, name, 'must be an integer') end
    elseif not string.find(t, '^%d+$') then
      return field_error(i, name, 'must be a non-negative integer')
    end
  end
  return field_error(i, 'spec', 'must be nine comma-separated integers ' .. table.concat(FIELDS, ',') .. ', got ' .. k)
end

-- The item of spec, the i-th of its call, or nil and an error reply naming
-- the field (see field_error) when spec is what the Go side never sends:
-- not nine integers, shadow other than 0 or 1, a value of 2^53 or more
-- (which a double may not hold exactly: 2^53 + 1 reads as 2^53; the
-- conversion rounds correctly, so such a text reads as 2^53 or more), an
-- unknown algorithm, rate 0, per 0 (but for a calendar window), burst 0
-- for a token bucket or a sliding window (its buckets), a negative cost
-- outside a settlement (keep unset), or calendar bounds out of order (cs
-- < ce < cn, or all 0 for no calendar). The item is kept in the table
-- when keep is set. The checks run only for a text not in the table, on
-- the numbers an item holds anyway; the calendar's are read only when one
-- of its texts is not '0'. The pattern admits only decimal digits, so
-- arithmetic converts the captured texts (x + 0) without a call of
-- tonumber for each.
local function parse_item(spec, keep, i)
  local a, rate, per, burst, sign, cost, shadow, cs, ce, cn = string.match(spec, SPEC)
  if not a then return nil, spec_error(i, spec) end
  local n, r, p, b, c = a + 0, rate + 0, per + 0, burst + 0, cost + 0
  local s, e, x = 0, 0, 0
  if cs ~= '0' or ce ~= '0' or cn ~= '0' then s, e, x = cs + 0, ce + 0, cn + 0 end
  if n >= MAX_EXACT or r >= MAX_EXACT or p >= MAX_EXACT or b >= MAX_EXACT or c >= MAX_EXACT or
     s >= MAX_EXACT or e >= MAX_EXACT or x >= MAX_EXACT then
    local long = n >= MAX_EXACT and 'alg' or r >= MAX_EXACT and 'rate' or p >= MAX_EXACT and 'per' or
      b >= MAX_EXACT and 'burst' or c >= MAX_EXACT and 'cost' or
      s >= MAX_EXACT and 'cs' or e >= MAX_EXACT and 'ce' or 'cn'
    return nil, field_error(i, long, 'must be below 2^53')
  end
  local alg = ALGORITHMS[n]
  if not alg then return nil, field_error(i, 'alg', 'names no algorithm: ' .. a) end
  if r == 0 then return nil, field_error(i, 'rate', 'must be a positive integer') end
  if p == 0 and e == 0 then
    return nil, field_error(i, 'per', 'must be a positive integer (0 only for a calendar window)')
  end
  if b == 0 and (alg == ALGORITHMS[1] or alg == ALGORITHMS[3]) then
    return nil, field_error(i, 'burst', 'must be a positive integer')
  end
  if sign == '-' then
    if keep then return nil, field_error(i, 'cost', 'must not be negative outside a settlement') end
    c = -c
  end
  if e == 0 and (s ~= 0 or x ~= 0) then return nil, field_error(i, 'cs', 'and cn must be 0 when ce is 0') end
  if e ~= 0 and not (s < e and e < x) then return nil, field_error(i, 'ce', 'must lie between cs and cn') end
  local lim = {rate = r, per = p, burst = b, per_text = per, burst_text = burst, cap = b * p,
               value_memo = {text_of = false, text = ''}, ttl_memo = {text_of = false, text = ''},
               window_memo = {text_of = false, text = ''}}
  if e ~= 0 then lim.cs, lim.ce, lim.cn = s, e, x end
  local it = {alg = alg, lim = lim, cost = c, shadow = shadow == '1'}
  if not keep then return it end
  if items_cached >= 4096 then item_cache, items_cached = {}, 0 end
  item_cache[spec], items_cached = it, items_cached + 1
  return it
end

-- The item of spec, the i-th of its call (see parse_item); keep is false
-- for a settlement.
local function item_of(spec, keep, i)
  local it = item_cache[spec]
  if it then return it end
  return parse_item(spec, keep, i)
end

-- The items that name the holder of a concurrency slot, by position in
-- the call (up to HELD_KEPT): each a copy of a parsed item whose lim
-- also holds the holder, kept from call to call so that a call allocates
-- none. A copy is rewritten when its position's parsed item changes (src;
-- a parsed item never changes but for its memos, which the copy shares),
-- and its holder on every call. Positions are per call, so two items of
-- one call never share a copy, even of one spec with two holders (a batch
-- of releases), and nothing keeps a copy's lim past its call but the next
-- call at its position.
local held_items, HELD_KEPT = {}, 64

-- The item it for the holder of a concurrency slot, the i-th item of the
-- call: the copy of it at position i (see held_items; a new table past
-- HELD_KEPT) whose lim names holder.
local function held_by(it, holder, i)
  local h = held_items[i]
  if not h then
    h = {lim = {}}
    if i <= HELD_KEPT then held_items[i] = h end
  end
  local lim = h.lim
  if h.src ~= it then
    local l = it.lim
    h.src, h.alg, h.cost, h.shadow = it, it.alg, it.cost, it.shadow
    lim.rate, lim.per, lim.burst, lim.per_text, lim.burst_text, lim.cap = l.rate, l.per, l.burst, l.per_text, l.burst_text, l.cap
    lim.value_memo, lim.ttl_memo, lim.window_memo = l.value_memo, l.ttl_memo, l.window_memo
    lim.cs, lim.ce, lim.cn = l.cs, l.ce, l.cn
  end
  lim.holder = holder
  return h
end
