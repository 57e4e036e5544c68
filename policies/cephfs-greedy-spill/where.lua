-- cephfs-greedy-spill, where chunk: Mantle's greedy spill sends half of this server's load to
-- its neighbour, the next server in id order (wrapping around).
local ids = {}
for id in pairs(targets) do ids[#ids + 1] = id end
if #ids == 0 then return targets end
table.sort(ids, function(a, b) return tostring(a) < tostring(b) end)
if math.type(whoami) then
  table.sort(ids, function(a, b) return a < b end)
end
local next_id = ids[1]
for _, id in ipairs(ids) do
  if id > whoami then next_id = id; break end
end
targets[next_id] = servers[whoami]["load"] / 2
return targets
