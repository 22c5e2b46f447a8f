-- The working states of one call's keys, and what the modes do with them.
-- These functions are built once when the library loads (a script builds
-- them on every call); a call passes them its own tables.
--
-- An item is {alg, lim, cost, shadow} (see items.lua). A working
-- state is {alg, lim, s, dirty}: the algorithm and limit it was loaded or
-- last changed with, the algorithm's state, and whether the call changed
-- it.

-- The working state of key for item it. work maps the call's keys to their
-- working states and order lists the keys in the order they were first
-- loaded. A key whose working state belongs to another algorithm is read
-- afresh, as absent when that state was changed in this call.
local function state_for(work, order, key, it, now)
  local w = work[key]
  if w and w.alg == it.alg then return w end
  local fresh = {alg = it.alg, lim = it.lim, s = false, dirty = false}
  if w and w.dirty then
    -- Keep the changed state unless this item changes the key in turn.
    fresh.s = it.alg.load(nil, it.lim, now)
    fresh.s.stale = true
    return fresh
  end
  fresh.s = it.alg.load(key, it.lim, now)
  if not w then order[#order + 1] = key end
  work[key] = fresh
  return fresh
end

-- Marks the working state w changed by item it, to be saved with its
-- limit. The state's same (its key holds the fields other than the
-- count or level as save would write them with the limit it was loaded
-- with) does not hold for another item's limit, whose per save writes.
local function changed_by(w, it)
  if w.lim ~= it.lim then w.s.same = false end
  w.dirty, w.lim = true, it.lim
end

-- Saves the changed working states of work, in order; keep_ttl keeps each
-- key's expiry.
local function save_changed(work, order, keep_ttl)
  for k = 1, #order do
    local key = order[k]
    local w = work[key]
    if w.dirty then w.alg.save(key, w.s, w.lim, keep_ttl) end
  end
end

-- Refund ('r') and settle ('s'): applies change(it, s, wants[i]) to the
-- state of each item i of the n (true when it changed the state) and
-- saves the changed keys, keeping their expiry when keep_ttl.
local function adjust(keys, items, wants, n, now, change, keep_ttl)
  local work, order = {}, {}
  for i = 1, n do
    local it = items[i]
    local w = state_for(work, order, keys[i], it, now)
    if it.cost ~= 0 and change(it, w.s, wants[i]) then
      changed_by(w, it)
      work[keys[i]] = w
    end
  end
  save_changed(work, order, keep_ttl)
  return {1}
end

local function refund_item(it, s)
  return it.cost > 0 and it.alg.give(s, it.lim, it.cost)
end

local function settle_item(it, s, at)
  return it.alg.settle(s, it.lim, it.cost, at)
end

-- Judges item it against its state s: whether it fits, and if so takes
-- its units (its cost, or for a reservation up to want, which only an
-- algorithm's own judge can do) from s. Writes the item's reply values as
-- if the group is admitted (see dispatch.lua): its five after reply[o]
-- and its three for a refund after reply[e]. Returns whether it fits and
-- the units it took.
local function judge(it, s, reply, o, e, want)
  local alg, lim, cost = it.alg, it.lim, it.cost
  if alg.judge then return alg.judge(it, s, reply, o, e, want) end
  local allowed = alg.fits(s, lim, cost)
  local rem0, retry, reset0, debt = alg.report(s, lim, cost, allowed)
  local rem1, reset1, taken = rem0, reset0, 0
  if allowed and cost > 0 then
    taken = cost
    alg.take(s, lim, taken)
    local _
    rem1, _, reset1 = alg.report(s, lim, cost, true)
  end
  local a = 0
  if allowed then a = 1 end
  reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4], reply[o + 5] = a, rem1, retry, reset1, debt or 0
  reply[e + 1], reply[e + 2], reply[e + 3] = rem0, reset0, taken
  return allowed, taken
end

-- Tables that a call fills and gives up when it ends, kept from call to
-- call so that a call allocates none of them (each allocation is work for
-- the Lua garbage collector too; the items naming a holder are kept in
-- items.lua, and an algorithm's load still makes its state): the call's
-- items and their wants, the replies of decide and evaluate by number of
-- items (up to 16), and the state each item took from. A call overwrites every entry
-- it reads, and Redis has turned a reply into its answer before the next
-- call begins.
local call_items, call_wants, replies, took = {}, {}, {}, {}

-- An array of 2 + 8 * n zeros, the reply of n items.
local function reply_of(n)
  local r = replies[n]
  if r then return r end
  r = {}
  for k = 1, 2 + 8 * n do r[k] = 0 end
  if n <= 16 then replies[n] = r end
  return r
end

-- Decide ('d') and evaluate ('e') of the n items, item i reserving up to
-- wants[i]: judges them in order and, when every non-shadow item fits
-- and commit is set, saves what they took. Returns the reply (see
-- dispatch.lua), cut after now when short is set: Redis ends a reply
-- array at the first nil of the table, and the next call that needs the
-- values writes them again.
local function decide_items(keys, items, wants, n, now, commit, short)
  local admitted = 1
  local reply = reply_of(n)
  -- Keys that appear once (the usual batch) need no table of states by
  -- key: each item's state is its own.
  local distinct = true
  for i = 2, n do
    local k = keys[i]
    for j = 1, i - 1 do
      if keys[j] == k then distinct = false end
    end
  end
  local work, order
  local taken_by = took
  if distinct then
    for i = 1, n do
      local it = items[i]
      local s = it.alg.load(keys[i], it.lim, now)
      local allowed, taken = judge(it, s, reply, 1 + (i - 1) * 5, 2 + n * 5 + (i - 1) * 3, wants[i])
      if not allowed and not it.shadow then admitted = 0 end
      taken_by[i] = taken > 0 and s
    end
  else
    work, order = {}, {}
    for i = 1, n do
      local it = items[i]
      local w = state_for(work, order, keys[i], it, now)
      local allowed, taken = judge(it, w.s, reply, 1 + (i - 1) * 5, 2 + n * 5 + (i - 1) * 3, wants[i])
      if not allowed and not it.shadow then admitted = 0 end
      if taken > 0 then
        changed_by(w, it)
        work[keys[i]] = w
      end
    end
  end
  if not commit then admitted = 0 end

  if admitted == 1 then
    if distinct then
      for i = 1, n do
        local s = taken_by[i]
        if s then items[i].alg.save(keys[i], s, items[i].lim, false) end
      end
    else
      save_changed(work, order, false)
    end
  else
    -- Nothing was consumed: remaining and reset as before, nothing taken.
    for i = 1, n do
      local o, e = 1 + (i - 1) * 5, 2 + n * 5 + (i - 1) * 3
      reply[o + 2], reply[o + 4], reply[e + 3] = reply[e + 1], reply[e + 2], 0
    end
  end
  reply[1] = admitted
  reply[2 + n * 5] = now
  if short then reply[3 + n * 5] = nil end
  return reply
end
