"""The live status page in a real browser (headless Chromium) on the Compose deployment: a
broker's container is SIGKILLed, and the page, reloading itself, shows it dead (its row, or the
death in the timeline) and then healed (up again, the heal in the timeline).

Chromium and its driver are Debian's packages (`chromium`, `chromium-driver`; .ci/run
installs them), driven through Selenium. Set FLIGHTS_STATUS_SCREENSHOT=PATH to keep the
screenshot taken once healed (docs/status-page.png comes from such a run).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from services.status.app import NOT_READY
from tests.conftest import running_in_ci

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
START_TIMEOUT_S = 300
HEAL_TIMEOUT_S = 120
POLL_S = 0.5
VICTIM = "broker-2"
PAGE_TITLE = "Flights Optimizer · status"  # services/status/templates/status.html


@pytest.fixture
def browser():
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        missing = "needs Debian's chromium and chromium-driver (.ci/run installs them)"
        if running_in_ci():
            pytest.fail(missing)  # CI installs them: their absence is a broken run
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1500,1250"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def state_of(html: str, service: str) -> str | None:
    match = re.search(rf'data-service="{re.escape(service)}" data-state="(\w+)"', html)
    return None if match is None else match.group(1)


def timeline_count(html: str, kind: str, service: str) -> int:
    return html.count(f'data-kind="{kind}" data-service="{service}"')


def watch(driver, url: str, what: str, condition, timeout_s: float, seen: list[str]) -> str:
    """The page's HTML once `condition(html)` holds; every state of the victim seen meanwhile
    goes to `seen`. The page reloads itself: this only reads what the browser shows -- except
    when the browser shows its own error page (a load the status service did not answer, e.g.
    still starting), which reloads nothing: the page is then asked for again, as a user would
    (seen once: the first load came before the service listened, and the test watched
    Chromium's error page for 300 s)."""
    from selenium.common.exceptions import WebDriverException

    deadline = time.monotonic() + timeout_s
    load_error = ""
    while time.monotonic() < deadline:
        if driver.title != PAGE_TITLE and NOT_READY not in driver.page_source:
            try:
                driver.get(url)
            except WebDriverException as error:  # e.g. net::ERR_CONNECTION_REFUSED / _RESET
                load_error = f"; the last load failed: {error.msg}"
                time.sleep(POLL_S)
                continue
        html = driver.page_source
        state = state_of(html, VICTIM)
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        if condition(html):
            return html
        time.sleep(POLL_S)
    raise AssertionError(f"the page did not show {what} in {timeout_s} s; states seen "
                         f"{seen}{load_error}")


def test_the_page_shows_a_killed_broker_dead_then_healed(shared_deployment, browser, tmp_path):
    # The suite's running deployment: the kill heals, and kill() records it for the others.
    deployment = shared_deployment  # watch() loads the page (again, while it does not answer)
    seen: list[str] = []
    watch(browser, deployment.status_url, f"{VICTIM} up and a health-checker leader", lambda html: (
        state_of(html, VICTIM) == "up" and "health-checker leader:" in html
        and "none (electing)" not in html and 'data-service="healthchecker-1"' in html),
        START_TIMEOUT_S, seen)
    before = {kind: timeline_count(browser.page_source, kind, VICTIM)
              for kind in ("death", "restart", "healed")}

    def more(html: str, kind: str) -> bool:
        """The timeline shows one more `kind` event of the victim than before the kill."""
        return timeline_count(html, kind, VICTIM) > before[kind]

    deployment.kill(VICTIM)
    seen.clear()
    # Dead on the page: its row says so (for the fraction of a second before the restart), or
    # the timeline keeps the death for a reload that missed that moment.
    watch(browser, deployment.status_url, f"{VICTIM} dead", lambda html: (
        state_of(html, VICTIM) == "dead" or more(html, "death")), HEAL_TIMEOUT_S, seen)
    html = watch(browser, deployment.status_url, f"{VICTIM} healed", lambda html: (
        state_of(html, VICTIM) == "up" and more(html, "death") and more(html, "healed")),
        HEAL_TIMEOUT_S, seen)
    assert more(html, "restart"), "the leader's restart decision is shown"
    assert "Spark master UI" in html and "Spark driver UI" in html
    screenshot = tmp_path / "status-page.png"
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000
    if os.environ.get("FLIGHTS_STATUS_SCREENSHOT"):
        shutil.copyfile(screenshot, Path(os.environ["FLIGHTS_STATUS_SCREENSHOT"]))
    print(f"states of {VICTIM} seen on the page after the kill: {seen}; screenshot {screenshot}")
