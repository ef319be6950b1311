"""The chat page at / in headless Chromium: type a prompt, see tokens arrive one after another."""
import shutil
import time

import pytest

from conftest import TOKEN

selenium = pytest.importorskip("selenium", reason="selenium is not installed in the venv")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


def find(*names):
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    return None


@pytest.fixture(scope="module")
def browser():
    chromium = find("chromium", "chromium-browser")
    driver_bin = find("chromedriver")
    if not chromium or not driver_bin:
        pytest.skip("chromium and chromedriver are not installed (Debian: chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,800"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(driver_bin), options=opts)
    yield d
    d.quit()


def auth_state(browser):
    el = browser.find_element(By.ID, "auth")
    return el.get_attribute("data-state") or "", el.text


def wait_for(predicate, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_chat_page_streams_tokens(worker, browser, tmp_path):
    # The page loads without a token and asks for it (issue 13); the token goes in a header, never in an address.
    browser.get(worker.url + "/")
    browser.execute_script(
        "window.__urls = []; const f = window.fetch;"
        "window.fetch = (u, o) => { window.__urls.push(String(u)); return f(u, o); };")
    assert wait_for(lambda: auth_state(browser)[0] == "needed"), auth_state(browser)
    assert "needs its API token" in auth_state(browser)[1]
    token = browser.find_element(By.ID, "token")
    token.send_keys("wrong-token")
    browser.find_element(By.ID, "prompt").click()  # the change event
    assert wait_for(lambda: auth_state(browser)[0] == "refused"), auth_state(browser)
    assert "invalid bearer token" in auth_state(browser)[1], "a wrong token is reported as wrong"
    token.clear()
    token.send_keys(TOKEN)
    browser.find_element(By.ID, "prompt").click()
    assert wait_for(lambda: browser.find_element(By.ID, "model").text.endswith(".gguf"))
    assert auth_state(browser)[0] == "ok"
    mt = browser.find_element(By.ID, "max_tokens")
    mt.clear()
    mt.send_keys("64")
    temp = browser.find_element(By.ID, "temperature")
    temp.clear()
    temp.send_keys("0")
    browser.find_element(By.ID, "prompt").send_keys("Write a short poem about bees.")
    browser.find_element(By.ID, "send").click()

    lengths = []
    deadline = time.time() + 120
    while time.time() < deadline:
        state, text = browser.execute_script(
            "const m = document.querySelector('.msg.assistant, .msg.error');"
            "return m ? [m.dataset.state, m.textContent] : ['', ''];")
        if text and (not lengths or lengths[-1] != len(text)):
            lengths.append(len(text))
        if state == "done":
            break
        time.sleep(0.01)
    browser.save_screenshot(str(tmp_path / "chat.png"))
    assert state == "done"
    assert browser.find_elements(By.CSS_SELECTOR, ".msg.error") == [], text
    assert text.strip(), "no answer"
    assert len(lengths) >= 3, f"the answer did not grow token by token: {lengths}"
    assert "tokens" in browser.find_element(By.CSS_SELECTOR, ".stats").text
    urls = browser.execute_script("return window.__urls")
    assert urls and all(TOKEN not in u and "token" not in u for u in urls), urls
    assert TOKEN not in browser.current_url


def test_chat_page_shows_tool_calls(browser, tmp_path):
    """A worker with tool support (the tiny model of tests/data with Qwen2.5's template): the page sends the tools
    typed into its Tools box and shows the call the model makes."""
    import json
    from test_openai_tools import WEATHER, tiny_worker
    w = tiny_worker("Qwen-Qwen2.5-7B-Instruct.jinja")
    try:
        browser.get(w.url + "/")
        token = browser.find_element(By.ID, "token")
        token.clear()
        token.send_keys(TOKEN)
        browser.find_element(By.ID, "prompt").click()  # the change event
        assert wait_for(lambda: browser.find_element(By.ID, "model").text.endswith(".gguf"))
        browser.find_element(By.CSS_SELECTOR, "details.tools summary").click()
        browser.execute_script("document.getElementById('tools').value = arguments[0];"
                               "document.getElementById('tool_choice').value = 'required';", json.dumps([WEATHER]))
        browser.find_element(By.ID, "prompt").send_keys("Weather in Paris?")
        browser.find_element(By.ID, "send").click()
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline and state != "done":
            state = browser.execute_script("const m = document.querySelector('.msg.assistant, .msg.error');"
                                           "return m ? m.dataset.state : '';")
            time.sleep(0.05)
        browser.save_screenshot(str(tmp_path / "tools.png"))
        assert state == "done"
        assert browser.find_elements(By.CSS_SELECTOR, ".msg.error") == []
        calls = browser.find_elements(By.CSS_SELECTOR, ".toolcall")
        assert calls and calls[0].text.startswith("→ get_weather(")
        args = calls[0].text[len("→ get_weather("):-1]
        assert set(json.loads(args)) == {"city", "unit"}
    finally:
        assert w.stop() == 0
