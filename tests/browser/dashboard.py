"""Drives /dashboard in headless Chromium for tests/dashboard.rs.

Usage: dashboard.py --url http://127.0.0.1:PORT/dashboard --screenshot PATH

Talks to the Rust test one line at a time:
  prints  `rendered restarts=N`   once the tree is on the page (N: the event store's restarts)
  reads   `panicked`              (the test crashed the event store)
  prints  `restart-shown restarts=M` once the page shows M > N, without a reload
  prints  `screenshot PATH`       and exits 0.
On a timeout it prints `error: ...`, saves a screenshot anyway and exits 1. It waits on
conditions in the page (WebDriverWait), never for a fixed time.
"""

import argparse
import os
import sys

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 30


def say(line):
    print(line, flush=True)


# Read in one script call: the page rebuilds the tree at each snapshot, so an element
# found in one call may be gone by the next.
READ = """
const node = document.querySelector('li[data-actor="' + arguments[0] + '"]');
return node ? [node.dataset.restarts, node.dataset.state] : null;
"""


def restarts(driver, actor):
    found = driver.execute_script(READ, actor)
    return int(found[0]) if found else None


def state(driver, actor):
    found = driver.execute_script(READ, actor)
    return found[1] if found else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--screenshot", required=True)
    args = parser.parse_args()

    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(flag)
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    awaited = "the page to load"
    try:
        driver.get(args.url)
        wait = WebDriverWait(driver, WAIT, poll_frequency=0.05)
        awaited = "the feed to be live and the tree rendered"
        actors = ("root", "event_store", "session_manager", "http_listener")
        wait.until(lambda d: d.execute_script("return document.getElementById('status').textContent") == "live"
                   and all(restarts(d, a) is not None for a in actors))
        before = restarts(driver, "event_store")
        say(f"rendered restarts={before}")

        awaited = "the test's `panicked`"
        if sys.stdin.readline().strip() != "panicked":
            raise RuntimeError("expected `panicked` on stdin")
        awaited = "the restart to show"
        wait.until(lambda d: (restarts(d, "event_store") or 0) > before
                   and state(d, "event_store") == "running")
        say(f"restart-shown restarts={restarts(driver, 'event_store')}")

        driver.save_screenshot(args.screenshot)
        say(f"screenshot {args.screenshot}")
        return 0
    except (TimeoutException, RuntimeError) as e:
        status = driver.find_elements(By.ID, "status")
        say(f"error: waiting for {awaited} ({type(e).__name__}); status: "
            f"{status[0].text if status else 'no page'}")
        driver.save_screenshot(args.screenshot)
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
