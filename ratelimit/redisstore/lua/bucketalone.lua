-- One token bucket decided alone: a call of one item, 'd' or 'c' without
-- wants or holders, whose spec was parsed already; the call most
-- decisions are. It is judged as decide_items judges one item, without
-- its loops and tables of states. A key without the field a (absent, or
-- expired) holds a full bucket, and what a decision on a full bucket
-- replies and writes depends on the item alone: it is worked out once per
-- item with the same code, kept in it.full, and then only copied.
--
-- BUCKET_ALONE set to false turns this path off (a test compares the
-- replies, stored state and time to live with and without it).
local BUCKET_ALONE = true

-- Judges item it alone on its bucket's state s as decide_items does,
-- writing the long reply (see dispatch.lua) but for the time into r.
-- Returns whether s is to be saved.
local function judge_alone(it, s, r)
  local allowed, taken = ALGORITHMS[1].judge(it, s, r, 1, 7, 0)
  if allowed or it.shadow then
    r[1] = 1
    return taken > 0
  end
  -- Nothing was consumed: remaining and reset as before, nothing taken.
  r[1] = 0
  r[3], r[5], r[10] = r[8], r[9], 0
  return false
end

-- What deciding item it alone on a full bucket replies and writes:
-- {long, short, level, ttl}: the long and the short reply with 0 for the
-- time, and, when it writes, the level's text and the text of the time
-- to live (ms, as expire_us sets it); nil when the general path is to
-- decide.
local function full_bucket(it)
  local lim = it.lim
  local s = ALGORITHMS[1].load(nil, lim, 0)
  local r = {}
  local f = {long = r}
  if judge_alone(it, s, r) then
    if s.level >= s.cap then return nil end -- save would delete the key
    local ms = cdiv(cdiv(s.cap - s.level, lim.rate), 1000)
    if ms < 1 then ms = 1 end
    f.level, f.ttl = int_text(s.level), int_text(ms)
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
  local bucket = ALGORITHMS[1]
  local v = rcall('HMGET', key, 'a', 'l', 's', 'p')
  local f = not v[1] and (it.full or full_bucket(it))
  if not f then
    local lim = it.lim
    local s = bucket.load(key, lim, now, v)
    local reply = reply_of(1)
    if judge_alone(it, s, reply) then bucket.save(key, s, lim, false) end
    reply[7] = now
    if short then reply[8] = nil end
    return reply
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
