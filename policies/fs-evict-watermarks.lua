-- fs-evict-watermarks: `pliant fs`'s default eviction trigger, DataWarp's rule. Once the cached
-- bytes pass the high watermark, evict (least recently used first) down to the low one.
--
-- Metrics: servers[whoami] has capacity, used, dirty (bytes), high, low, dirty_high, dirty_low
-- (fractions of the capacity, as mounted), and rates since the last decision (read_rate,
-- write_rate, copy_up_rate, writeback_rate, bytes/s) and idle_secs (since the last application
-- read or write).
-- Decision: when = evict now; howmuch = the cached bytes to evict down to.

function load()
  return servers[whoami]["used"]
end

function when()
  local s = servers[whoami]
  return s["used"] > s["high"] * s["capacity"]
end

function howmuch()
  local s = servers[whoami]
  return s["low"] * s["capacity"]
end
