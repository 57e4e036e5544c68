# shellcheck shell=bash
# Sourced by the scripts that run a Redis Cluster beside pliant's (tools/bench/vs_redis_cluster.sh,
# tools/bench/rescale_scale.sh): free ports for its nodes.
#
#   free_cluster_ports N   prints N ports (see below)

# $1 ports P, each free with its cluster bus port P+10000 too, none equal to another's bus port.
# P is drawn from 10000-22767 so that P+10000 stays below 32768, where Linux's ephemeral ports
# start by default: an outgoing connection cannot take one between this check and redis-server's
# bind.
free_cluster_ports() {
    python3 - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
rng = random.SystemRandom()
chosen, held = [], []
for _ in range(2000):
    if len(chosen) == n:
        break
    p = rng.randrange(10000, 22768)
    if any(abs(p - q) in (0, 10000) for q in chosen):
        continue
    socks = []
    for port in (p, p + 10000):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            break
        socks.append(s)
    if len(socks) == 2:
        chosen.append(p)
        held += socks
    else:
        for s in socks:
            s.close()
for s in held:
    s.close()
if len(chosen) < n:
    sys.exit("no free port pairs P, P+10000 in 10000-32767")
print(*chosen)
EOF
}
