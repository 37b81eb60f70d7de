"""A page rendered in a real headless Chromium (Debian's `chromium`), driven over the DevTools
protocol on a pipe (`--remote-debugging-pipe`: commands on fd 3, replies and events on fd 4,
each a JSON message ended by NUL): every request the page asked for, every console message and
uncaught exception, a query of the rendered DOM, and a screenshot.

The browser runs with a fresh profile, background networking off, and every host name mapped to
nothing behind a dead proxy on 127.0.0.1, so a request the page makes is seen here and goes
nowhere.
"""

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import unavailable

CHROMIUM = "chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--remote-debugging-pipe",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
)
TIMEOUT_S = 60.0


def chromium() -> str:
    """The chromium binary; a missing one fails the test under APPLIANCE_REQUIRE_DOCKER=1."""
    found = shutil.which(CHROMIUM)
    if found is None:
        unavailable("chromium is not installed (scripts/bootstrap.sh installs it)")
        raise AssertionError("unreachable")
    return found


@dataclass
class Rendered:
    """What one page load did and showed."""

    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text) of every message
    exceptions: list[str] = field(default_factory=list)
    query: Any = None  # what the DOM query returned
    screenshot: bytes = b""

    @property
    def errors(self) -> list[str]:
        return [text for level, text in self.console if level == "error"] + self.exceptions

    def network_requests(self) -> list[str]:
        """Requests for anything but the page's own file and inline data: URIs."""
        return [u for u in self.requests if not (u.startswith("data:") or u.startswith("file://"))]


class _Pipe:
    """The DevTools connection: numbered commands, replies matched by id, events kept."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.write_fd, self.read_fd = write_fd, read_fd
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.read_fd], [], [], left)[0]:
                raise AssertionError("chromium did not answer over the DevTools pipe in time")
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise AssertionError("chromium closed the DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for(self, method: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._message(deadline))


def render(page: Path, query: str, width: int = 1280, height: int = 900) -> Rendered:
    """Load `page` (a file) in headless Chromium, then evaluate the JavaScript expression
    `query` through the DevTools protocol (not in the page: its policy forbids scripts) and
    take a full-page screenshot."""
    binary = chromium()
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()

    def pipes_as_3_and_4() -> None:  # via fresh copies: the pipes may already be 3 to 6
        commands, replies = os.dup(to_browser_r), os.dup(from_browser_w)
        os.dup2(commands, 3)
        os.dup2(replies, 4)

    with tempfile.TemporaryDirectory(prefix="appliance-chromium-") as profile:
        process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=pipes_as_3_and_4,  # noqa: PLW1509 - fds 3 and 4 are the protocol's
            close_fds=False,  # the dup2'ed 3 and 4 stay; Python opens every other fd non-inheritable
            env={**os.environ, "HOME": profile},
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        pipe = _Pipe(to_browser_w, from_browser_r)
        try:
            return _load(pipe, page, query, width, height)
        finally:
            with contextlib.suppress(AssertionError, OSError):  # already gone
                pipe.call("Browser.close")
            os.close(to_browser_w)
            os.close(from_browser_r)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _load(pipe: _Pipe, page: Path, query: str, width: int, height: int) -> Rendered:
    target = pipe.call("Target.createTarget", url="about:blank")["targetId"]
    session = pipe.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Network", "Runtime", "Log"):
        pipe.call(f"{domain}.enable", session)
    pipe.events.clear()  # about:blank's own events
    pipe.call("Page.navigate", session, url=page.absolute().as_uri())
    pipe.wait_for("Page.loadEventFired")
    time.sleep(0.5)  # late console messages (a policy violation is reported after the load)
    result = pipe.call("Runtime.evaluate", session, expression=query, returnByValue=True)
    if "exceptionDetails" in result:
        raise AssertionError(f"the DOM query failed: {result['exceptionDetails']}")
    metrics = pipe.call("Page.getLayoutMetrics", session)["cssContentSize"]
    pipe.call(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=width,
        height=max(height, int(metrics["height"])),
        deviceScaleFactor=1,
        mobile=False,
    )
    shot = pipe.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
    rendered = Rendered(query=result["result"].get("value"), screenshot=base64.b64decode(shot["data"]))
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            rendered.requests.append(params["request"]["url"])
        elif method == "Log.entryAdded":
            entry = params["entry"]
            rendered.console.append((entry["level"], entry.get("text", "")))
        elif method == "Runtime.consoleAPICalled":
            level = "error" if params["type"] in ("error", "assert") else params["type"]
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            rendered.console.append((level, text))
        elif method == "Runtime.exceptionThrown":
            rendered.exceptions.append(str(params["exceptionDetails"].get("text")))
    return rendered
