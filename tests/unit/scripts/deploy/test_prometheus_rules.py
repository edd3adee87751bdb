"""The deployment's Prometheus rules (compose/prometheus/alerts.yml): they load, and each alert
fires and clears on the series of compose/prometheus/alerts_test.yml (`promtool test rules`;
promtool comes with Debian's `prometheus` package, which .ci/run installs)."""

import shutil
import subprocess

import yaml

from scripts.deploy.compose_file import COMPOSE_DIR

RULES_DIR = COMPOSE_DIR / "prometheus"
RULES = RULES_DIR / "alerts.yml"
RULES_TEST = RULES_DIR / "alerts_test.yml"
PROMTOOL_TIMEOUT_S = 60


def _promtool(*args: str) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: apt-get install prometheus (see .ci/run)"
    return subprocess.run([promtool, *args], cwd=RULES_DIR, capture_output=True, text=True,
                          timeout=PROMTOOL_TIMEOUT_S, check=False)


def _alert_names(path) -> set[str]:
    return {rule["alert"] for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "alert" in rule}


def test_rules_are_valid():
    done = _promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_and_clears_in_the_rules_test():
    done = _promtool("test", "rules", RULES_TEST.name)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {case["alertname"] for test in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for case in test["alert_rule_test"]}
    assert tested == _alert_names(RULES)
    for test in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        expectations = [bool(case["exp_alerts"]) for case in test["alert_rule_test"]]
        # Quiet first, firing, then quiet again: each alert is seen to fire and to clear.
        assert expectations[0] is False and True in expectations and expectations[-1] is False, \
            test["name"]
