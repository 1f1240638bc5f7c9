"""Headless Chromium for the console's browser tests (Debian's ``chromium`` and
``chromium-driver``, installed by ``make browser``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def headless_chromium(implicit_wait_s: float) -> Iterator[Any]:
    """A Selenium Chrome driver, headless, 1400x1000, waiting up to ``implicit_wait_s`` seconds
    for an element to appear; quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options,
                              service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    driver.implicitly_wait(implicit_wait_s)
    try:
        yield driver
    finally:
        driver.quit()
