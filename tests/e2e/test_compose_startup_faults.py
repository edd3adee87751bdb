"""Start-up is a fault window like any other (issue 21).

The killer runs from the very first second of `docker-compose up` (a SIGKILL every 3 s, nobody
spared but the client), before any container exists, while they are created and started,
and on through the start of the session. `up` must succeed -- no service waits for another to
be healthy at one instant -- every killed instance must come back, and the session's results
must be exact. The scenario is checked first: faults landed before `up` returned.

The seed is drawn per run and printed (KASKA_STARTUP_CHAOS_SEED replays one).
"""

from __future__ import annotations

import io
import os
import random
import threading
import time

import pytest

from scripts import killer
from tests.e2e.conftest import assert_results_exact

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]

CLIENT = "client-1"
INTERVAL_S = 3.0
FIRE_AFTER_UP_S = 30.0  # the chaos goes on this long once `up` returned (the session starts)
FIRE_S_MAX = 600.0
SESSION_TIMEOUT_S = 720.0
COME_BACK_TIMEOUT_S = 180.0
ONE_SHOT = {"datagen", CLIENT}  # not restarted when they exit: the data generator, the client


def test_up_with_the_killer_from_the_first_second_succeeds_heals_and_stays_exact(
        deployment, e2e_data):
    seed = int(os.environ.get("KASKA_STARTUP_CHAOS_SEED", random.randrange(1 << 30)))
    faults: list[killer.Fault] = []
    up_done = threading.Event()
    returned_at: list[float] = []
    out = io.StringIO()

    def fire() -> None:
        killer.chaos(killer.DockerBackend(deployment.project), INTERVAL_S, FIRE_S_MAX,
                     excludes=["client"], rng=random.Random(seed), out=out, faults=faults,
                     stop_when=lambda _faults: up_done.is_set()
                     and time.time() > returned_at[0] + FIRE_AFTER_UP_S)

    chaos = threading.Thread(target=fire, name="startup-chaos", daemon=True)
    chaos.start()
    try:
        deployment.up()
        returned_at.append(time.time())
    finally:
        if not returned_at:
            returned_at.append(time.time())
        up_done.set()
        chaos.join(FIRE_AFTER_UP_S + 2 * INTERVAL_S + 60)
    print(f"\n[startup chaos] seed {seed}\n{out.getvalue()}")
    assert not chaos.is_alive(), "the chaos loop did not stop"
    during_up = [f for f in faults if f.wall_at < returned_at[0]]
    assert during_up, f"no fault landed before `up` returned: {out.getvalue()}"

    deployment.wait_client_done(CLIENT, SESSION_TIMEOUT_S)
    services = {name for name in deployment.containers() if name not in ONE_SHOT}
    killed = {f.name for f in faults}
    deployment.wait_for(f"every service running again after {len(faults)} faults",
                        lambda: services <= set(deployment.running()), COME_BACK_TIMEOUT_S)
    assert killed <= services | ONE_SHOT, (killed, services)
    assert_results_exact(deployment.results_dir / CLIENT, e2e_data)
    print(f"[startup chaos] {len(faults)} faults ({len(during_up)} before `up` returned) on "
          f"{sorted(killed)}; every one back; the session's results exact")
