"""Build the documentation site, serve it on localhost and take full-page screenshots in headless Chromium.

    python scripts/docs_screenshots.py OUT_DIR [--config-file mkdocs.yml] [--page PATH ...] [--width 1280]

Writes one PNG per page into OUT_DIR (home.png, science_mocose.png, running_ray-cluster.png by default) and
prints, for each page, what the browser saw: how many formulas KaTeX rendered, how many it could not parse,
how many were left as raw TeX, and how many code blocks were highlighted. Exits 1 when a page failed to
load or left math unrendered, so it doubles as a check that the site reads offline.

Needs the docs extra (`pip install -e '.[docs]'`) and Chromium (`apt-get install chromium` on Debian; or
--chromium PATH). No other package: the browser is driven over its DevTools pipe (--remote-debugging-pipe)
with the standard library alone.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PAGES = ("", "science/mocose/", "running/ray-cluster/")
# What the page holds once its scripts ran: rendered formulas, KaTeX's parse errors, math still raw, code.
PROBE = r"""(() => {
  const raw = [...document.querySelectorAll('.arithmatex')].filter(e => !e.querySelector('.katex')).length;
  return JSON.stringify({
    title: document.title,
    formulas: document.querySelectorAll('.arithmatex .katex').length,
    katex_errors: document.querySelectorAll('.katex-error').length,
    raw_math: raw,
    raw_toc_math: [...document.querySelectorAll('.md-nav__link')].filter(e => e.textContent.includes('\\(')).length,
    code_blocks: document.querySelectorAll('.highlight pre').length,
    highlighted_tokens: document.querySelectorAll('.highlight pre span[class]').length,
    tables: document.querySelectorAll('.md-typeset table').length,
    nav_links: document.querySelectorAll('.md-nav__link').length,
  });
})()"""


class Browser:
    """Headless Chromium driven over the DevTools protocol on fds 3 and 4 (--remote-debugging-pipe)."""

    def __init__(self, chromium: str, width: int, height: int):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="docs-shots-profile-")

        def fds_3_and_4():  # in the child: the pipe ends where Chromium looks for them (dup2's are inherited;
            high_r, high_w = os.dup(to_chrome_r), os.dup(from_chrome_w)  # every other fd of ours is not, PEP 446)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self._process = subprocess.Popen(
            [chromium, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--disable-extensions",
             f"--user-data-dir={self._profile}", f"--window-size={width},{height}", "about:blank"],
            close_fds=False, preexec_fn=fds_3_and_4,  # close_fds would close 3 and 4 after preexec_fn
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._buffer = b""
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.width, self.height = width, height

    def _read_message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe (did it start? try --chromium PATH)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params) -> dict:
        return self.call(method, session=True, **params)

    def wait_for_event(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(event.get("method") == name for event in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {name} within {timeout} s")
            self.events.append(self._read_message())

    def screenshot(self, url: str, out: Path) -> dict:
        """Load `url`, wait for its fonts and scripts, save a full-page PNG to `out`; return PROBE's answer."""
        self.page("Page.enable")
        self.page("Page.bringToFront")  # a background tab runs no animation frames: the tabs bar would not fade in
        self.page("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                  mobile=False)
        self.events.clear()
        self.page("Page.navigate", url=url)
        self.wait_for_event("Page.loadEventFired")
        self.page("Runtime.evaluate", awaitPromise=True,
                  expression="document.fonts.ready.then(() => new Promise(r => setTimeout(r, 500)))")
        # Full page: make the viewport as tall as the page, let the theme settle, then capture the viewport.
        # (captureBeyondViewport resizes the view during the capture itself, and the theme's resize handling
        # restarts the tabs bar's fade-in: the capture then shows it half transparent.)
        height = min(int(self.page("Page.getLayoutMetrics")["cssContentSize"]["height"]) + 1, 16000)
        self.page("Emulation.setDeviceMetricsOverride", width=self.width, height=max(height, self.height),
                  deviceScaleFactor=1, mobile=False)
        self.page("Runtime.evaluate", awaitPromise=True, expression="new Promise(r => setTimeout(r, 1000))")
        found = json.loads(self.page("Runtime.evaluate", expression=PROBE, returnByValue=True)["result"]["value"])
        shot = self.page("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
        return found

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        shutil.rmtree(self._profile, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@contextlib.contextmanager
def served(site: Path):
    """The built site on http://127.0.0.1:PORT/ (a free port), for the duration of the block."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def find_chromium(given: str | None) -> str:
    for name in ([given] if given else ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no Chromium found: apt-get install chromium (Debian), or pass --chromium PATH")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="folder for the PNGs (made if missing)")
    ap.add_argument("--config-file", type=Path, default=ROOT / "mkdocs.yml", help="mkdocs.yml to build")
    ap.add_argument("--page", action="append", metavar="PATH",
                    help="a page's URL path, e.g. science/mocose/ ('' for the home page); repeatable "
                    f"(default: {', '.join(repr(p) for p in DEFAULT_PAGES)})")
    ap.add_argument("--width", type=int, default=1280, help="viewport width in CSS pixels (default 1280)")
    ap.add_argument("--chromium", help="the browser to run (default: chromium on the PATH)")
    args = ap.parse_args(argv)
    chromium = find_chromium(args.chromium)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    config = args.config_file.resolve()

    with tempfile.TemporaryDirectory(prefix="docs-site-") as site:
        build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                                "--site-dir", site], cwd=config.parent, capture_output=True, text=True,
                               env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        if build.returncode != 0:
            print(build.stderr[-4000:], file=sys.stderr)
            print("mkdocs build --strict failed; no screenshots taken", file=sys.stderr)
            return 1
        failed = False
        with served(Path(site)) as base:
            browser = Browser(chromium, args.width, 900)
            try:
                for path in args.page if args.page is not None else DEFAULT_PAGES:
                    name = path.strip("/").replace("/", "_") or "home"
                    out = args.out_dir / f"{name}.png"
                    found = browser.screenshot(base + path, out)
                    print(f"{out}: {json.dumps(found)}")
                    if found["raw_math"] or found["raw_toc_math"] or found["katex_errors"] or "404" in found["title"]:
                        failed = True
            finally:
                browser.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
