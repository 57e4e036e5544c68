-- parsplice-no-progress: the studies' two-phase policy, watched. It absorbs and trims as
-- parsplice-absorb-trim does, and grows the cache back, for good, when the application stops
-- making progress after a trim or the cache thrashes: the cache studies' future work, "adaptable
-- policies that automatically switch to new strategies when the current strategy behaves poorly
-- (e.g., thrashing, making no progress)".
--
-- Progress is what the cache is for, which a hit rate only stands for: a ParSplice run's
-- trajectory in the model, what the application reports with PLIANT.PROGRESS in pliant serve.
-- Its rate falls as the system grows, so the yardstick is its rate over the `window` decisions
-- just before the trim; after the trim, the rate over the last `window` decisions below `stall`
-- times that is a stall. Thrashing is the tier above serving more than `thrash` of the reads over
-- the last `window` decisions. Without a progress signal (progress_per_s nil) only thrashing is
-- watched.
--
-- Metrics: keys; progress_per_s; fetches_per_s and reads_per_s.
-- Decision: when = resize now; howmuch = keys to keep (the target after the trim, `grow` once
-- grown back).
-- Params: absorb (100000 keys), target (1000 keys), grow (keys to grow back to; default absorb),
-- window (10 decisions), stall (0.25), thrash (0.5).
-- State (WRstate, survives a restart): "absorbing", "trimmed <yardstick>", or "grown".

local absorb = params.absorb or 100000
local target = params.target or 1000
local grow = params.grow or absorb
local window = params.window or 10
local stall = params.stall or 0.25
local thrash = params.thrash or 0.5

-- The last `window` decisions' rates (kept in the VM; a restart starts the window anew).
local recent = {}

local function remember(progress, fetches, reads)
  recent[#recent + 1] = { progress = progress, fetches = fetches or 0, reads = reads or 0 }
  if #recent > window then
    table.remove(recent, 1)
  end
end

-- Mean progress rate over the window, or nil when it is not full or has no progress signal.
local function progress_rate()
  if #recent < window then
    return nil
  end
  local sum = 0
  for _, r in ipairs(recent) do
    if r.progress == nil then
      return nil
    end
    sum = sum + r.progress
  end
  return sum / #recent
end

-- Share of the window's reads the tier above served, or nil before the window is full.
local function fetch_share()
  if #recent < window then
    return nil
  end
  local fetches, reads = 0, 0
  for _, r in ipairs(recent) do
    fetches = fetches + r.fetches
    reads = reads + r.reads
  end
  if reads <= 0 then
    return nil
  end
  return fetches / reads
end

local function phase()
  local s = RDstate()
  if s == 0 or s == "absorbing" then
    return "absorbing", nil
  end
  if s == "grown" then
    return "grown", nil
  end
  local yardstick = tonumber(string.match(tostring(s), "^trimmed (%S+)$"))
  return "trimmed", yardstick
end

function load()
  return servers[whoami]["keys"] or 0
end

function when()
  local me = servers[whoami]
  local keys = me["load"]
  local now, yardstick = phase()
  remember(me["progress_per_s"], me["fetches_per_s"], me["reads_per_s"])
  if now == "absorbing" then
    if keys <= absorb then
      return false
    end
    -- The trim: the progress rate before it is the yardstick (nil without a signal).
    local before = progress_rate()
    WRstate("trimmed " .. tostring(before or "none"))
    recent = {}
    BAL_LOG(2, "absorb phase over at", keys, "keys; trimming to", target,
      "; progress before:", before or "none")
    return true
  end
  if now == "grown" then
    -- Grown for good: only a capacity something else lowered is put back.
    return (me["capacity"] or grow) < grow
  end
  local rate = progress_rate()
  local share = fetch_share()
  local stalled = yardstick ~= nil and rate ~= nil and rate < stall * yardstick
  local thrashing = share ~= nil and share > thrash
  if stalled or thrashing then
    WRstate("grown")
    BAL_LOG(1, stalled and "no progress" or "thrashing", "after the trim (progress",
      rate or "none", "against", yardstick or "none", "before; fetched share", share or "none",
      "): growing the cache back to", grow, "keys")
    return true
  end
  return keys > target
end

function howmuch()
  local now = phase()
  if now == "grown" then
    return grow
  end
  return target
end
