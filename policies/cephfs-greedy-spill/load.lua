-- cephfs-greedy-spill, load chunk (Mantle-library style: runs before each other chunk).
-- A server's load is its metadata request rate `req_rate`, or the `load` metric if it reports
-- no rate. Computed for every server, since `when` compares against the cluster average.
for _, s in pairs(servers) do
  s["load"] = s["req_rate"] or s["load"] or 0
end
return servers[whoami]["load"]
