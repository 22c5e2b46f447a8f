-- One token bucket decided alone: a call of one item, 'd' or 'c' without
-- wants or holders, whose spec was parsed already; the call most
-- decisions are. A key without the field a (absent, or expired) holds a
-- full bucket, and what a decision on a full bucket replies and writes
-- depends on the item alone: it is worked out once per item by the
-- general code (load, judge, and what decide_items and save do after
-- them), kept in it.full, and then only copied. A key with a goes the
-- general way, with its fields read already.
--
-- BUCKET_ALONE set to false turns this path off (a test compares the
-- replies, stored state and time to live with and without it).
local BUCKET_ALONE = true

-- What deciding item it alone on a full bucket replies and writes:
-- {long, short, level, ttl}: the long and the short reply with 0 for the
-- time, and, when it writes, the level's text and the text of the time
-- to live (ms, see expire_us); nil when the general path is to decide.
local function full_bucket(it)
  local lim = it.lim
  local s = ALGORITHMS[1].load(nil, lim, 0)
  local r = {}
  local allowed, taken = judge(it, s, r, 1, 7, 0)
  local f = {long = r}
  if allowed or it.shadow then
    r[1] = 1
    if taken > 0 then
      if s.level >= s.cap then return nil end -- save would delete the key
      local ms = cdiv(cdiv(s.cap - s.level, lim.rate), 1000)
      if ms < 1 then ms = 1 end
      f.level, f.ttl = int_text(s.level), int_text(ms)
    end
  else
    r[1] = 0
    r[3], r[5], r[10] = r[8], r[9], 0
  end
  r[7] = 0
  f.short = {r[1], r[2], r[3], r[4], r[5], r[6], 0}
  it.full = f
  return f
end

-- Decides item it alone on keys[1] at now; the reply is cut after now
-- when short is set (see decide_items).
local function decide_bucket_alone(keys, it, now, short)
  local key = keys[1]
  local v = rcall('HMGET', key, 'a', 'l', 's', 'p')
  local f = not v[1] and (it.full or full_bucket(it))
  if not f then
    call_items[1], call_wants[1] = it, 0
    return decide_items(keys, call_items, call_wants, 1, now, true, short, v)
  end
  if f.level then
    rcall('HSET', key, 'a', '1', 'l', f.level, 's', call_now_text, 'p', it.lim.per_text)
    rcall('PEXPIRE', key, f.ttl)
  end
  local reply = f.long
  if short then reply = f.short end
  reply[7] = now
  return reply
end
