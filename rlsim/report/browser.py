"""Open a report in headless Chromium and say what a person would see: script errors, what each
plot drew (its lane labels, traces and shaded faults), and screenshots.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages ended by a NUL byte, commands on the browser's fd 3, answers on its fd 4), so nothing
beyond the standard library and a ``chromium`` binary is needed. Used by the report's browser
test and by ``rlsim report DIR --screenshots FOLDER``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlsim.files import new_file, write_file

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")

# What the page drew, read from the rendered SVG (not from the figure's data): each plot's lane
# labels on its first y axis, its legend entries, its shaded spans; the summary's rows.
LOOK_JS = """
(async () => {
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    id: gd.id,
    drawn: gd.querySelectorAll('svg.main-svg').length > 0,
    lanes: Array.from(gd.querySelectorAll('.yaxislayer-above .ytick text, .yaxislayer-above '
      + '.y2tick text')).map(t => t.textContent),
    legend: Array.from(gd.querySelectorAll('.legend .legendtext')).map(t => t.textContent),
    shaded: gd.querySelectorAll('.shapelayer path').length,
    bars: gd.querySelectorAll('.barlayer .point').length,
    points: gd.querySelectorAll('.scatterlayer .point').length,
  }));
  const sections = Array.from(document.querySelectorAll('section.scenario')).map(s => ({
    id: s.id, checks: s.querySelectorAll('table.checks tbody tr').length,
    links: Array.from(s.querySelectorAll('.links a')).map(a => a.textContent)}));
  return JSON.stringify({title: document.title, plots, sections,
    summary_rows: document.querySelectorAll('table.summary tbody tr').length});
})()
"""


class BrowserError(RuntimeError):
    """Chromium could not be started, or did not answer in time."""


@dataclass
class Look:
    """What headless Chromium showed of a page."""

    title: str
    errors: list[str]                       # uncaught exceptions, console errors, failed loads
    plots: list[dict]                       # per plot: id, drawn, lanes, legend, shaded, ...
    sections: list[dict]                    # per scenario: id, checks (rows), links
    summary_rows: int
    screenshots: list[Path] = field(default_factory=list)
    then: object = None                     # what ``then`` returned, when given


def find_chromium() -> str | None:
    """The Chromium (or Chrome) on PATH, or None."""
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def look(page: Path, screenshots: Path | None = None, width: int = 1400,
         timeout: float = 60.0, then: str | None = None) -> Look:
    """Open ``page`` and read what it drew; with ``screenshots`` (a folder), save the top of the
    page as ``report.png`` and each scenario's section as ``<section id>.png``; with ``then``
    (a JavaScript expression), evaluate it last (as a user's clicks) and keep its value."""
    exe = find_chromium()
    if exe is None:
        raise BrowserError(f"no Chromium on PATH (looked for {', '.join(BROWSERS)}): install "
                           "Debian's `chromium` (ci/setup.sh does, as root)")
    with tempfile.TemporaryDirectory(prefix="rlsim-chromium-", ignore_cleanup_errors=True) \
            as profile, _DevTools(exe, profile, timeout) as tools:
        target = tools.call("Target.createTarget", url="about:blank")["targetId"]
        session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            tools.call(f"{domain}.enable", session=session)
        tools.call("Emulation.setDeviceMetricsOverride", session=session, width=width,
                   height=900, deviceScaleFactor=1, mobile=False)
        tools.call("Page.navigate", session=session, url=page.resolve().as_uri())
        tools.wait_event("Page.loadEventFired", session)
        seen = json.loads(tools.evaluate(session, LOOK_JS))
        result = Look(seen["title"], tools.errors(), seen["plots"], seen["sections"],
                      seen["summary_rows"])
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)
            result.screenshots = _shoot(tools, session, screenshots, width,
                                        [s["id"] for s in seen["sections"]])
        if then is not None:
            result.then = tools.evaluate(session, then)
        return result


def _shoot(tools: _DevTools, session: str, folder: Path, width: int, ids: list[str]) -> list[Path]:
    """The page's first 1,600 px, then each section by its bounding box."""
    shots = [("report", {"x": 0, "y": 0, "width": width, "height": 1600})]
    for sid in ids:
        box = json.loads(tools.evaluate(
            session, f"(() => {{ const r = document.getElementById({json.dumps(sid)})"
                     ".getBoundingClientRect(); return JSON.stringify({x: 0, y: r.top + "
                     "window.scrollY, width: r.width + 20, height: r.height}); })()"))
        shots.append((sid, box))
    out = []
    for name, clip in shots:
        data = tools.call("Page.captureScreenshot", session=session, format="png",
                          captureBeyondViewport=True, clip={**clip, "scale": 1})["data"]
        path = folder / f"{name}.png"
        write_file(path, base64.b64decode(data))
        out.append(path)
    return out


class _DevTools:
    """A headless Chromium and its DevTools pipe: ``call`` a method and get its result,
    ``wait_event`` for an event; every event seen is kept (for :meth:`errors`)."""

    def __init__(self, exe: str, profile: str, timeout: float) -> None:
        self.timeout, self.events, self.next_id, self.buffer = timeout, [], 0, b""
        self.log = Path(profile) / "chromium.log"  # a file: a full pipe would stall Chromium
        to_browser, self.out = os.pipe()
        self.inp, from_browser = os.pipe()

        def pipes_at_3_and_4() -> None:  # in the child: its ends where Chromium expects them
            # (the parent's other descriptors are not inheritable, PEP 446: none leak to it)
            a, b = os.dup(to_browser), os.dup(from_browser)  # above 4 first, so no clash
            os.dup2(a, 3)
            os.dup2(b, 4)

        try:
            with new_file(self.log) as log:
                # its own session: the renderer and helper processes go with it (killpg)
                self.proc = subprocess.Popen(
                    [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                     "--hide-scrollbars", "--remote-debugging-pipe",
                     f"--user-data-dir={profile}"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                    close_fds=False, preexec_fn=pipes_at_3_and_4)  # closing would close 3, 4
        except OSError as e:
            for fd in (self.out, self.inp):
                os.close(fd)
            raise BrowserError(f"Chromium ({exe}) could not be started: {e}") from None
        finally:
            os.close(to_browser)
            os.close(from_browser)

    def __enter__(self) -> _DevTools:
        return self

    def __exit__(self, *exc) -> None:
        try:
            with contextlib.suppress(BrowserError, subprocess.TimeoutExpired):
                self._send("Browser.close", None, {})
                self.proc.wait(timeout=10)
        finally:
            # what is left of its session (helpers outlive a browser that was killed)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            os.close(self.out)
            os.close(self.inp)

    def evaluate(self, session: str, expression: str):
        """The value of a JavaScript expression (awaited); BrowserError when it throws."""
        answer = self.call("Runtime.evaluate", session=session, expression=expression,
                           awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in answer:
            d = answer["exceptionDetails"]
            raise BrowserError("the page's script threw: " + str(
                d.get("exception", {}).get("description") or d.get("text")))
        return answer.get("result", {}).get("value")

    def call(self, method: str, session: str | None = None, **params) -> dict:
        sent = self._send(method, session, params)
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._read(deadline, method)
            if msg.get("id") == sent:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error'].get('message')}")
                return msg.get("result", {})

    def wait_event(self, method: str, session: str | None) -> dict:
        for e in self.events:
            if e["method"] == method and e.get("sessionId") == session:
                return e
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._read(deadline, method)
            if msg.get("method") == method and msg.get("sessionId") == session:
                return msg

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries (failed loads)."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                thrown = d.get("exception", {}).get("description") or d.get("text")
                out.append(f"exception: {thrown}")
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append("console.error: " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
        return out

    def _send(self, method: str, session: str | None, params: dict) -> int:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self.out, json.dumps(msg).encode() + b"\0")
        except OSError as e:  # the browser is gone (broken pipe)
            raise BrowserError(f"Chromium: {method} not sent ({e}){self._stderr()}") from None
        return self.next_id

    def _read(self, deadline: float, waiting_for: str) -> dict:
        poll = select.poll()  # not select(): a long pytest run may hold fds past 1024
        poll.register(self.inp, select.POLLIN)
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            ready = poll.poll(max(left, 0) * 1000)
            chunk = os.read(self.inp, 1 << 20) if ready else b""
            if not chunk:
                why = "no answer" if not ready else "the browser exited"
                err = self._stderr() if ready else ""
                raise BrowserError(f"Chromium: {why} while waiting for {waiting_for} "
                                   f"({self.timeout:g} s){err}")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        try:
            msg = json.loads(raw)
        except ValueError:
            raise BrowserError(f"Chromium sent what is not JSON: {raw[:200]!r}") from None
        if "method" in msg:
            self.events.append(msg)
        return msg

    def _stderr(self) -> str:
        text = self.log.read_text(errors="replace").strip()
        return f": {text[-800:]}" if text else ""
