"""Chaos verification, the library under `python -m scripts.chaos_verify`: rounds of client
sessions under random SIGKILLs and pauses (nobody spared; the faults: scripts/faults/), each
session checked against the reference and each fault against its heal.
The parts:

    heal           pure accounting: faults + starts + sightings -> heal records, statistics
    table          the report (Markdown tables)
    rounds         one round whatever the deployment (RoundOptions, RoundResult, run_round)
    compose_round  the round driver of a Compose deployment
    local_round    the round driver of run_local's processes
    campaign       a run's rounds one after the other on one target (RoundTarget, run_rounds)
    session_data   a session's input (generated, with malformed lines) and its reference
    clients_data   each client its own input, for rounds of several clients

The command line is scripts/chaos_verify.py.

Sessions are judged by the oracle (oracle/session_check.py over oracle/reference.py); their
input comes from session_data (generated data with malformed lines).
"""
