"""The embedded-default launcher, the library under `python -m scripts.run_local`, one concern
each:

    console      the one output channel (`say`)
    errors       RunLocalError
    ports        free_ports: ports free for TCP and UDP on 127.0.0.1
    layout       RunLayout (where a run keeps its registry, logs and broker data) and the
                 service names
    local_cluster  every broker command line (BrokerSpec -> broker_argv), one broker child
                 process (LocalBroker) and a cluster of them (LocalCluster: the nemesis, the
                 benchmarks and the integration tests run brokers with it)
    brokers      the launcher's broker cluster: each broker's spec (`--peers` the others),
                 waiting until every broker listens and the cluster has a leader
    platform     LocalPlatform: registering with the local registry, spawning, reaping,
                 readiness, stopping
    sample_data  generated input files, reused when made with the same parameters
    sessions     the client sessions: their command lines, outcomes, the wait for them
    chaos        ChaosThread: the chaos loop (scripts/faults/) on a thread, healing awaited
    log_tail     LogTail: the clients' log lines as they come
    report       the run's summary, restart counts
    config       LaunchConfig: what one run is asked to do, typed
    run          run(): the parts wired together; start_platform lives in platform

scripts/run_local.py parses the flags into a LaunchConfig and calls run().
"""
