-- cephfs-greedy-spill, when chunk: migrate when this server's load is above the cluster average
-- and has been for more than two consecutive decisions. The count of consecutive overloaded
-- decisions is kept with WRstate and reset as soon as the server is not overloaded.
local total, n = 0, 0
for _, s in pairs(servers) do
  total = total + s["load"]
  n = n + 1
end
local overloaded = servers[whoami]["load"] > total / n
local count = 0
if overloaded then count = RDstate() + 1 end
WRstate(count)
return count > 2
