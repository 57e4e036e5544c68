-- fs-writeback-when-idle: the watermark rule, and besides it, write everything back as soon as
-- the job has left the file system alone for `params.idle` seconds (default 5): the backing
-- store is then the cache's alone, and the next burst finds the cache clean.
--
-- Metrics: as fs-evict-watermarks.
-- Decision: when = write back now; howmuch = the dirty bytes to write back down to.

local idle = params.idle or 5

function load()
  return servers[whoami]["dirty"]
end

function when()
  local s = servers[whoami]
  local running = RDstate() == 1
  if s["dirty"] > s["dirty_high"] * s["capacity"] then
    running = true
  elseif s["dirty"] <= s["dirty_low"] * s["capacity"] then
    running = false
  end
  WRstate(running and 1 or 0)
  return running or (s["dirty"] > 0 and s["idle_secs"] >= idle)
end

function howmuch()
  local s = servers[whoami]
  if s["idle_secs"] >= idle then
    return 0
  end
  return s["dirty_low"] * s["capacity"]
end
