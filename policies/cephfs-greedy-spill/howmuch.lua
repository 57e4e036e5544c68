-- cephfs-greedy-spill, howmuch chunk: how to pick the units of load to send (CephFS dirfrags,
-- Pliant hash slots), as Mantle's list of strategies: the balancer tries each and sends the
-- selection closest to the target amount.
return {"big", "small", "big_small"}
