"""The nemesis: real broker processes under a seeded random schedule of faults (SIGKILL and
restart, SIGSTOP/SIGCONT, network cuts between brokers, restarts with a wiped data directory,
topic delete + re-create) while idempotent acks=all producers and consumers run; then a
history checker over everything acknowledged and read, a byte comparison of every replica,
and an idle-CPU check. `python -m scripts.nemesis --help`; `make nemesis`.

Modules: `schedule` (the pure seeded fault plan), `history` (what was produced and read, and
the checker), `proxy` (a cuttable TCP proxy per ordered broker pair), `cluster` (the broker
processes and their faults), `workload` (producers, consumers, the topic churner), `replicas`
(each replica's stored bytes once the brokers are stopped), `run` (one whole round).
"""
