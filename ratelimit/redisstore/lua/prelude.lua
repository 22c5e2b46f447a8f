-- Shared arithmetic for the rate limit scripts.
--
-- Lua numbers are doubles: integers are exact below 2^53, and every value
-- kept or compared here stays below that bound (the Go side validates
-- limits so that Burst*Per and Rate*Per are at most 2^53).
--
-- Divisions use the % operator, a % b = a - floor(a / b) * b, which is
-- exact for integers 0 <= a <= 2^53 and 0 < b < 2^53: the rounded
-- quotient a / b can only reach the next integer q + 1 when the true
-- quotient is within half a unit in the last place below it, which needs
-- a > 2^53, so floor(a / b) is the true quotient and the product and
-- difference are exact integers (TestLuaDivisions checks this). (math.fmod is exact too, but a call of a C function
-- costs the Lua VM as much as some 30 of its own instructions.)

local MAX_EXACT = 9007199254740992 -- 2^53

-- redis.call, read by the entry point at its first call (see
-- dispatch.lua): an upvalue costs the Lua VM less than looking up the
-- global redis and its field call on every use.
local rcall

-- floor(a / b) for a >= 0, b > 0.
local function fdiv(a, b)
  return (a - a % b) / b
end

-- ceil(a / b) for b > 0 and any integer a.
local function cdiv(a, b)
  if a <= 0 then
    local q = fdiv(-a, b)
    if q == 0 then return 0 end
    return -q
  end
  local r = a % b
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

-- floor(a * b / c) for integers 0 <= a, b, c < 2^53, c > 0, computed exactly
-- even when a * b is not representable. Returns nil when the quotient is
-- 2^53 or more.
local function muldiv(a, b, c)
  if a == 0 or b == 0 then return 0 end
  if a <= fdiv(MAX_EXACT, b) then return fdiv(a * b, c) end
  -- Multiply in base 2^16 limbs (little-endian), then divide bit by bit.
  local A, B, P = {}, {}, {0, 0, 0, 0, 0, 0, 0, 0}
  for i = 1, 4 do
    A[i] = a % 65536; a = (a - A[i]) / 65536
    B[i] = b % 65536; b = (b - B[i]) / 65536
  end
  for i = 1, 4 do
    for j = 1, 4 do P[i + j - 1] = P[i + j - 1] + A[i] * B[j] end
  end
  local carry = 0
  for k = 1, 8 do
    local v = P[k] + carry
    P[k] = v % 65536
    carry = (v - P[k]) / 65536
  end
  local q, rem = 0, 0
  for k = 8, 1, -1 do
    local limb = P[k]
    for bit = 15, 0, -1 do
      local d, p = 0, 2 ^ bit
      if limb >= p then d = 1; limb = limb - p end
      -- rem = 2*rem + d, reduced modulo c without leaving the exact range.
      if rem >= c - rem - d then
        rem = rem - (c - rem) + d
        q = 2 * q + 1
      else
        rem = 2 * rem + d
        q = 2 * q
      end
      if q >= MAX_EXACT then return nil end
    end
  end
  return q
end

-- The decimal text of an integer x with |x| <= 2^53: the digits Redis
-- writes for a number argument (it formats with %.17g, which prints such
-- a value as a plain integer), at a fraction of the cost of that
-- floating-point conversion.
local function int_text(x)
  return string.format('%d', x)
end

-- int_text(x) through a memo of one value, memo.text_of and memo.text:
-- writing the same number as the last time costs a comparison instead of
-- a formatting (a call of a C function, which costs the Lua VM as much as
-- some 30 of its own instructions). A parsed item's lim serves as the memo
-- (see items.lua): the level a token bucket keeps after one admission from
-- full, and the time to live that follows, are the same for every key of
-- a policy.
local function memo_text(x, memo)
  if memo.text_of == x then return memo.text end
  local t = int_text(x)
  memo.text_of, memo.text = x, t
  return t
end

-- The time (µs) of the call being run and its decimal text, as the entry
-- point read them (TIME's reply, or the caller's argument), so that the
-- time is written without formatting it again.
local call_now, call_now_text = 0, '0'

-- ZEROS[k] pads a number of k < 6 digits to 6.
local ZEROS = {'00000', '0000', '000', '00', '0', ''}

-- int_text(x) for a time x (µs), usually the call's own.
local function time_text(x)
  if x == call_now then return call_now_text end
  return int_text(x)
end

-- Sets the key's time to live to us microseconds rounded up to whole
-- milliseconds, at least 1 ms; memo is a memo_text memo of its own for
-- the text of the milliseconds.
local function expire_us(key, us, memo)
  local ms = cdiv(us, 1000)
  if ms < 1 then ms = 1 end
  rcall('PEXPIRE', key, memo_text(ms, memo))
end

-- Reads a hash's fields as numbers; a missing field is nil. A nil key
-- reads as an absent one.
local function hget_numbers(key, ...)
  local out = {}
  if not key then return out end
  local v = rcall('HMGET', key, ...)
  for i = 1, select('#', ...) do
    if v[i] then out[i] = tonumber(v[i]) end
  end
  return out
end

-- Algorithms register themselves here by their Go Algorithm value. Each
-- provides:
--   load(key, lim, now) -> s     state normalised to now (absent = full);
--                                a nil key is absent; s.stale is true when
--                                another algorithm wrote the key
--   fits(s, lim, cost) -> bool
--   take(s, lim, cost)           consume cost
--   report(s, lim, cost, allowed) -> remaining, retry_us, reset_us, debt
--                                (debt: units owed beyond empty after a
--                                settlement; optional, nil is 0)
--   judge(it, s, reply, o, e, want) -> allowed, taken  in place of the
--                                three above: what state.lua's judge
--                                does with them, and reserving up to
--                                want (see dispatch.lua)
--   save(key, s, lim, keep_ttl)  write the state, and its TTL unless keep_ttl
--   give(s, lim, cost) -> bool   refund cost; true when s changed
--   settle(s, lim, delta, at) -> bool  apply a signed settlement (see
--                                ratelimit.Settle): a refund never above
--                                capacity, to what the reservation made
--                                at at (µs; 0 unknown) charged, a charge
--                                even past it (debt); true when s changed
--   holds                        optional: true when an item names the
--                                holder of a slot, in lim.holder
-- lim has fields rate, per (µs), burst and more (see items.lua); s
-- carries the time it was normalised to as s.now.
local ALGORITHMS = {}
