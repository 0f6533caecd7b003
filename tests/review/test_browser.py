"""The review page in a real headless Chromium (Selenium): open a run, filter, open an episode, record a
verdict, reload and see it, export it. Skips, saying why, without chromium, chromium-driver or selenium
(`.ci/setup_browser.sh` installs them as root). MAPPA_REVIEW_SCREENSHOTS=DIR saves a picture of each page
there (docs/figures/review_*.png are made so)."""
from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from mappa_train.review.labels import export_labels
from mappa_train.review.server import free_port, prepare

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -c requirements/constraints.txt selenium)"
    if not CHROMIUM or not DRIVER:
        return "chromium and chromedriver are not installed (as root: bash .ci/setup_browser.sh)"
    return None


@pytest.fixture
def site(runs):
    """A real uvicorn server on a free loopback port, over the made runs."""
    import uvicorn

    port = free_port()
    served = prepare([runs], None, "127.0.0.1", port, None, "ann")
    server = uvicorn.Server(uvicorn.Config(served.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the review server did not start in 30 s"
        time.sleep(0.05)
    yield served
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def browser():
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def shot(driver, name: str) -> None:
    folder = os.environ.get("MAPPA_REVIEW_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"review_{name}.png"))


def test_a_reviewer_filters_opens_judges_reloads_and_exports(site, browser, tmp_path):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    base = site.url
    browser.get(base)
    everything = browser.find_element(By.ID, "count").text
    assert everything.startswith(f"{len(site.index.episodes)} of {len(site.index.episodes)} episodes")
    shot(browser, "list")

    Select(browser.find_element(By.NAME, "outcome")).select_by_value("wrong")
    browser.find_element(By.ID, "apply").click()
    wrong = [e for e in site.index.episodes if e.correct is False]
    # a click returns before the navigation it starts lands: wait for each page before reading it
    WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: "outcome=wrong" in b.current_url
        and b.find_element(By.ID, "count").text.startswith(f"{len(wrong)} of "))
    links = browser.find_elements(By.CSS_SELECTOR, "#episodes a")
    assert [int(a.text) for a in links] == [e.id for e in wrong]

    target = next(e for e in wrong if e.actions[0].prompt)  # an eval episode: it records what each agent saw
    next(a for a in links if a.text == str(target.id)).click()
    WebDriverWait(browser, 20).until(lambda b: b.current_url.endswith(f"/episode/{target.id}"))
    turns = browser.find_elements(By.CSS_SELECTOR, "section.turn")
    assert len(turns) == len(target.actions)
    prompt = turns[0].find_element(By.TAG_NAME, "details")
    assert not prompt.find_element(By.TAG_NAME, "pre").is_displayed()  # collapsed until asked for
    prompt.find_element(By.TAG_NAME, "summary").click()
    assert prompt.find_element(By.TAG_NAME, "pre").is_displayed()
    shot(browser, "episode")

    form = turns[1].find_element(By.CSS_SELECTOR, "form.verdict-form")
    form.find_element(By.NAME, "score").send_keys("2.5")
    form.find_element(By.CSS_SELECTOR, "input[name=right][value='0']").click()
    form.find_element(By.NAME, "note").send_keys("checked in a browser <b>")
    form.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(browser, 20).until(lambda b: b.current_url.endswith(f"/episode/{target.id}#a1"))
    browser.refresh()
    given = browser.find_element(By.CSS_SELECTOR, "#a1 .given").text
    assert "score 2.5" in given
    assert "wrong" in given
    assert "checked in a browser <b>" in given
    assert "(ann," in given

    labels = export_labels(site.store.path, tmp_path / "labels")
    assert [(r["line"], r["action_index"], r["human_score"], r["label"], r["note"]) for r in labels] == \
        [(target.line, 1, 2.5, False, "checked in a browser <b>")]

    browser.get(base.rstrip("/") + "/queue")
    assert f'/episode/{target.id}#a1' not in browser.page_source
    shot(browser, "queue")
    browser.get(base.rstrip("/") + "/plots")
    assert len(browser.find_elements(By.TAG_NAME, "svg")) == 5
    shot(browser, "plots")


def test_hostile_text_never_runs_in_the_browser(site, browser):
    from selenium.webdriver.common.by import By

    hostile = next(e for e in site.index.episodes if e.source.endswith("hostile/transcripts.jsonl"))
    browser.get(f"{site.url.rstrip('/')}/episode/{hostile.id}")
    assert browser.title.startswith(f"episode {hostile.id}")  # the script and the onerror never ran
    shown = browser.find_element(By.CSS_SELECTOR, "#a0 pre.action").text
    assert shown == hostile.actions[0].text  # the forged fence and tags show as the agent wrote them
    assert browser.find_elements(By.CSS_SELECTOR, "#a0 pre.action img") == []
