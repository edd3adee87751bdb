"""`python -m common.kaska topics|produce|consume|offsets` against a real broker."""

import os
import subprocess
import sys

import pytest

from scripts.launcher.local_cluster import REPO

pytestmark = pytest.mark.integration


def _cli(broker, *args, stdin=b""):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "common.kaska", "--brokers", broker.address,
                           *args], input=stdin, capture_output=True, cwd=REPO, env=env,
                          timeout=60, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_topics_produce_consume_offsets(broker, topic_name):
    assert _cli(broker, "topics", "--create", topic_name, "--partitions", "2")[0] == 0
    code, out, _ = _cli(broker, "topics")
    assert code == 0 and f"{topic_name}\t2" in out.splitlines()
    code, _, err = _cli(broker, "produce", "--topic", topic_name, stdin=b"one\ntwo\nthree\n")
    assert code == 0 and "produced 3 records" in err
    code, out, _ = _cli(broker, "consume", "--topic", topic_name, "--partition", "0",
                        "--from-beginning", "--max-messages", "3", "--commit",
                        "--group", "cli")
    assert code == 0 and out.splitlines() == ["one", "two", "three"]
    code, out, _ = _cli(broker, "offsets", "--topic", topic_name, "--group", "cli")
    assert code == 0
    assert out.splitlines()[1:] == ["0\t0\t3\t3", "1\t0\t0\t-"]
    code, out, _ = _cli(broker, "consume", "--topic", topic_name, "--idle-timeout-s", "0.2",
                        "--group", "cli")
    assert code == 0 and out == ""  # resumes at the committed offset: nothing new
    code, _, err = _cli(broker, "topics", "--create", topic_name)
    assert code == 1 and "TopicAlreadyExistsError" in err
