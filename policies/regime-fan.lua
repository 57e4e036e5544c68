-- regime-fan: the "fan" regime detector of the ParSplice cache studies.
--
-- Input: timeseries() of (timestamp, key id) for recent accesses, ids numbered in order of first
-- appearance. In a plot of id over time, each superbasin the simulation explores shows as a
-- "fan" opening upward from its first key. Walking from the newest point to the oldest:
--   * a new fan starts whenever an id drops below the current fan's bottom (its lowest id);
--   * a fan's top is the largest id in it;
--   * a fan whose top lies below the previous (newer) fan's bottom marks a regime boundary;
--     otherwise it belongs to the same regime as that fan.
-- A regime's id range is the union of its fans' ranges.
--
-- The rule is literal: a run of ids that falls going backward (rises in time, as new keys do)
-- makes one single-point fan per step, each below the last, so each step is a boundary. Feed it
-- accesses, which revisit a basin's keys, rather than first appearances.
--
-- Decision: when = at least two regimes exist; howmuch = the id span of the regimes found, the
-- sum over regimes of (top - bottom + 1): the keys those regimes need cached.

local memo_key, memo_regimes = nil, nil

-- Returns the regimes, newest first, each {lo = bottom id, hi = top id}.
local function regimes()
  local ts = timeseries()
  local n = ts:size()
  if n == 0 then return {} end
  local first_ts = ts:get(1)
  local last_ts = ts:get(n)
  local key = n .. ":" .. first_ts .. ":" .. last_ts
  if key == memo_key then return memo_regimes end

  local found = {}
  local lo, hi            -- current regime
  local prev_bottom       -- bottom of the previous (newer) fan
  local fb, ft            -- current fan's bottom and top
  local function close_fan()
    if prev_bottom ~= nil and ft < prev_bottom then
      found[#found + 1] = { lo = lo, hi = hi }
      lo, hi = nil, nil
    end
    if lo == nil then
      lo, hi = fb, ft
    else
      if fb < lo then lo = fb end
      if ft > hi then hi = ft end
    end
    prev_bottom = fb
  end
  for i = n, 1, -1 do
    local _, id = ts:get(i)
    if fb == nil then
      fb, ft = id, id
    elseif id < fb then
      close_fan()
      fb, ft = id, id
    elseif id > ft then
      ft = id
    end
  end
  close_fan()
  found[#found + 1] = { lo = lo, hi = hi }
  memo_key, memo_regimes = key, found
  return found
end

function when()
  return #regimes() >= 2
end

function howmuch()
  local span = 0
  for _, r in ipairs(regimes()) do
    span = span + (r.hi - r.lo + 1)
  end
  return span
end
