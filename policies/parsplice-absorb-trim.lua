-- parsplice-absorb-trim: the two-phase cache policy of the ParSplice cache studies.
--
-- Early in a ParSplice run a flash crowd of reads hits few keys; trimming the cache then costs
-- trajectory length. So: let the cache grow ("absorb") until it has once held more than
-- `params.absorb` keys, then, whenever it holds more than `params.target` keys, trim it to
-- `params.target`. Whether the absorb phase is over is remembered with WRstate, so a restarted
-- service does not absorb a second time.
--
-- Metrics: servers[whoami]["keys"], the number of keys the cache holds.
-- Decision: when = trim now; howmuch = keys to keep.
-- Params: absorb (default 100000 keys), target (default 1000 keys).

local absorb = params.absorb or 100000
local target = params.target or 1000

function load()
  return servers[whoami]["keys"] or 0
end

function when()
  local keys = servers[whoami]["load"]
  if RDstate() == 0 and keys > absorb then
    WRstate(1)
    BAL_LOG(2, "absorb phase over at", keys, "keys; trimming to", target, "from now on")
  end
  return RDstate() == 1 and keys > target
end

function howmuch()
  return target
end
