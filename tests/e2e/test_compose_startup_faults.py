"""Start-up is a fault window like any other.

The killer runs from the very first second of `docker-compose up` (a SIGKILL every 3 s, nobody
spared but the client and the one-shot data generator, which nothing restarts): its first
fault lands as soon as a first container runs, while the others are created and started, and
it goes on through the start of the session. `up` must succeed -- no service waits for another
to be healthy at one instant -- every killed instance must come back, and the session's results
must be exact. The scenario is checked first: faults landed while the deployment was starting,
before the client's session began (`up` itself returns within seconds now, often before the
second fault).

Like `make docker-compose-up`, the test keeps the host's watch below the health checkers
(scripts/deploy/checker_keeper.py): a killer every 3 s can take all three down before any of them
answers (seen on a loaded machine: nothing was left to restart anything), and then the keeper
starts them again; every other heal is still the checkers' own.

The seed is drawn per run and printed (KASKA_STARTUP_CHAOS_SEED replays one).
"""

from __future__ import annotations

import io
import os
import random
import threading
import time

import pytest

from scripts.deploy.checker_keeper import CheckerKeeper, DockerCheckers
from scripts.faults import chaos as killer
from scripts.faults.backends import DockerBackend
from tests.e2e.conftest import assert_results_exact

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]

CLIENT = "client-1"
INTERVAL_S = 3.0
FIRST_CONTAINER_POLL_S = 0.05
SESSION_STARTED_LINE = r"session of"
SPARED = ["client", "datagen"]
FIRE_AFTER_UP_S = 30.0  # the chaos goes on this long once `up` returned (the session starts)
FIRE_S_MAX = 600.0
SESSION_TIMEOUT_S = 720.0
COME_BACK_TIMEOUT_S = 180.0
ONE_SHOT = {"datagen", CLIENT}  # not restarted when they exit: the data generator, the client


def test_up_with_the_killer_from_the_first_second_succeeds_heals_and_stays_exact(
        deployment, e2e_data, request):
    seed = int(os.environ.get("KASKA_STARTUP_CHAOS_SEED", random.randrange(1 << 30)))
    faults: list[killer.Fault] = []
    up_done = threading.Event()
    returned_at: list[float] = []
    out = io.StringIO()

    def fire() -> None:
        backend = DockerBackend(deployment.project)
        while not up_done.is_set() and not [
                name for name in backend.running() if not killer.is_excluded(name, SPARED)]:
            time.sleep(FIRST_CONTAINER_POLL_S)  # the first fault as soon as there is a victim
        killer.chaos(backend, INTERVAL_S, FIRE_S_MAX, excludes=SPARED,
                     rng=random.Random(seed), out=out, faults=faults,
                     stop_when=lambda _faults: up_done.is_set()
                     and time.time() > returned_at[0] + FIRE_AFTER_UP_S)

    chaos = threading.Thread(target=fire, name="startup-chaos", daemon=True)
    keeper = CheckerKeeper(DockerCheckers(deployment.project),
                           say=lambda text: print(text, file=out)).start()
    request.addfinalizer(keeper.stop)  # stopped before the deployment goes down, even on failure
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
    session_began = deployment.wait_for_log(CLIENT, SESSION_STARTED_LINE, SESSION_TIMEOUT_S).at
    during_start = [f for f in faults if f.wall_at < session_began]
    assert during_start, f"no fault landed before the session began: {out.getvalue()}"
    during_up = [f for f in faults if f.wall_at < returned_at[0]]

    deployment.wait_client_done(CLIENT, SESSION_TIMEOUT_S)
    services = {name for name in deployment.containers() if name not in ONE_SHOT}
    killed = {f.name for f in faults}
    deployment.wait_for(f"every service running again after {len(faults)} faults",
                        lambda: services <= set(deployment.running()), COME_BACK_TIMEOUT_S)
    kept = keeper.stop()
    assert killed <= services | ONE_SHOT, (killed, services)
    assert_results_exact(deployment.results_dir / CLIENT, e2e_data)
    print(f"[startup chaos] {len(faults)} faults ({len(during_up)} before `up` returned, "
          f"{len(during_start)} before the session began) on "
          f"{sorted(killed)}; every one back; the session's results exact; every checker down "
          f"at once {len(kept)} time(s), started again by the keeper")
