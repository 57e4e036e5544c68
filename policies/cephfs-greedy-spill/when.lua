-- cephfs-greedy-spill, when chunk: spill once this server has been overloaded for more than two
-- consecutive decisions and its neighbour (the next server in id order, wrapping around) is not.
-- Overloaded is Ceph's MDBalancer test: a load at least `min_rebalance` above the cluster
-- average (params.min_rebalance, default 0.1, Ceph's mds_bal_min_rebalance). Mantle's greedy
-- spill sheds only to an idle neighbour; "not overloaded" is idle relative to the cluster, so
-- the spill goes on while a neighbour has room and stops once every server is within
-- `min_rebalance` of the average. The count is kept with WRstate and reset as soon as the
-- server is not overloaded.
local margin = 1 + (params.min_rebalance or 0.1)
local total, n, ids = 0, 0, {}
for id, s in pairs(servers) do
  total = total + s["load"]
  n = n + 1
  ids[#ids + 1] = id
end
local average = total / n
local overloaded = servers[whoami]["load"] >= average * margin
local count = 0
if overloaded then count = RDstate() + 1 end
WRstate(count)
if count <= 2 then return false end
if math.type(whoami) then
  table.sort(ids, function(a, b) return a < b end)
else
  table.sort(ids, function(a, b) return tostring(a) < tostring(b) end)
end
local next_id = ids[1]
for _, id in ipairs(ids) do
  if id > whoami then next_id = id; break end
end
return next_id ~= whoami and servers[next_id]["load"] < average * margin
