-- static-limit: keep at most `params.limit` keys (default 100000).
--
-- Metrics: servers[whoami]["keys"].
-- Decision: when = the cache holds more than the limit; howmuch = keys to keep.

local limit = params.limit or 100000

function load()
  return servers[whoami]["keys"] or 0
end

function when()
  return servers[whoami]["load"] > limit
end

function howmuch()
  return limit
end
