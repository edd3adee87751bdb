"""The parts of `python -m scripts.run_local` (the embedded default), one concern each:

    console      the one output channel (`say`)
    errors       RunLocalError
    ports        free_ports: ports free for TCP and UDP on 127.0.0.1
    layout       RunLayout (where a run keeps its registry, logs and broker data) and the
                 service names
    brokers      the broker cluster: each broker's command line (`--peers` the others), waiting
                 until every broker listens and the cluster has a leader
    platform     LocalPlatform: registering with the local registry, spawning, reaping,
                 readiness, stopping
    sample_data  generated input files, reused when made with the same parameters
    sessions     the client sessions: their command lines, outcomes, the wait for them
    chaos        ChaosThread: the killer's chaos loop on a thread
    report       log tails, the run's summary, restart counts

scripts/run_local.py parses the flags and wires these together.
"""
