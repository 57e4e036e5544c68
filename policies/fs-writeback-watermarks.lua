-- fs-writeback-watermarks: `pliant fs`'s default write-back trigger. Once the dirty bytes pass
-- the dirty high watermark, the write-back threads run until they are down to the dirty low
-- one. Whether a round is running is kept with WRstate, so the rule has its hysteresis.
--
-- Metrics: as fs-evict-watermarks.
-- Decision: when = write back now; howmuch = the dirty bytes to write back down to.

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
  return running
end

function howmuch()
  local s = servers[whoami]
  return s["dirty_low"] * s["capacity"]
end
