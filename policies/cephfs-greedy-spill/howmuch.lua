-- cephfs-greedy-spill, howmuch chunk: which dirfrags to pick, as Mantle's list of strategies.
return {"half"}
