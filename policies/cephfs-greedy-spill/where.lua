-- cephfs-greedy-spill, where chunk: Mantle's greedy spill sends half of this server's load to
-- its neighbour, the next server in id order (wrapping around), but never more than its excess
-- over the cluster average, so that a spill cannot leave this server underloaded and the
-- neighbour with more than this server had: each spill brings the cluster closer to even.
local ids, total, n = {}, 0, 0
for id, s in pairs(servers) do
  ids[#ids + 1] = id
  total = total + s["load"]
  n = n + 1
end
if #ids < 2 then return targets end
if math.type(whoami) then
  table.sort(ids, function(a, b) return a < b end)
else
  table.sort(ids, function(a, b) return tostring(a) < tostring(b) end)
end
local next_id = ids[1]
for _, id in ipairs(ids) do
  if id > whoami then next_id = id; break end
end
local mine = servers[whoami]["load"]
-- (Nothing from a server under the average: `where` also runs in a dry run, whatever `when` says.)
targets[next_id] = math.max(0, math.min(mine / 2, mine - total / n))
return targets
