"""``tether web``: start-up, a long session's page, live latency, many followers; prints figures.

Usage: python bench/bench_web.py [--runs R] [--events N] [--tabs T] [--sessions S] [--only NAMES]

Figures (targets in docs/web.md):

* ``start``: spawn ``tether web`` → its first page answered (the URL printed,
  then ``GET /`` with the token served), R times; and the server's CPU time
  by then.
* ``paint``: the session page of a stored N-event session (default 10,000), in
  Chromium: navigation → first contentful paint, and → every record rendered;
  then how responsive the page is: the longest task that held its main thread
  while it loaded, and a key typed in the prompt box → the next frame painted.
* ``listing``: the sessions page over S stored sessions (default 1,000), in
  Chromium: navigation → the first rows shown (200, the page's first page),
  for the first visit after a start (the server folds each session's figures
  then) and the next ones; and ``GET /api/sessions`` of all S, and a search.
* ``live``: a live session followed by one page; for every record appended
  while the page is open, append → painted (``requestAnimationFrame`` after the
  record is in the page), median and p90.
* ``tabs``: the server's CPU time (from ``/proc``) for the same prompts with 1
  follower and with T followers (event streams read to the end), interleaved R
  times; and the server's resident memory with 0 then 100 idle followers
  attached, per follower.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.web.chromium import CHROMIUM, CHROMIUM_ARGS

from bench_acp_load import SESSION_ID, write_session

ROOT = Path(__file__).resolve().parents[1]
TURNS = 30
"""Turns of the ``tabs`` workload (each a bash call and a streamed summary)."""


class Web:
    """A ``tether web`` process."""

    def __init__(self, home: Path) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tether.cli.main", "--data-dir", str(home), "web"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "TETHER_MODEL": "offline"},
            cwd=str(ROOT),
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url:
            raise RuntimeError("tether web printed no URL")
        self.base = self.url.split("/?", 1)[0]
        self.token = self.url.split("token=", 1)[1]
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def serving(self) -> float:
        """Seconds from spawn to the first page served."""
        request = urllib.request.Request(self.base + "/", headers=self.headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        return time.perf_counter() - self.started

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.process.terminate()
        self.process.communicate(timeout=30)


def spread(values: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    values = sorted(values)
    return (
        f"median {statistics.median(values) * scale:.1f} {unit}, "
        f"min {values[0] * scale:.1f}, max {values[-1] * scale:.1f} (n={len(values)})"
    )


def bench_start(runs: int) -> None:
    times, cpu = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            web = Web(Path(tmp))
            try:
                times.append(web.serving())
                cpu.append(web.cpu_seconds())
            finally:
                web.stop()
    print(f"start → serving: {spread(times)}  (target ≤ 1000 ms)")
    print(
        f"  … the server's CPU time by then (the figure a busy machine moves least): {spread(cpu)}"
    )


def bench_paint(runs: int, events: int) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        asyncio.run(write_session(home, events, "jsonl"))
        web = Web(home)
        try:
            web.serving()
            stored = httpx.get(f"{web.base}/api/sessions/{SESSION_ID}", headers=web.headers)
            events = stored.json()["events"]  # whole turns: a few under the number asked
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(bypass_csp=True)  # to read the paint timings
                context.add_init_script(LONG_TASKS)
                page = context.new_page()
                page.goto(web.url)
                first_paints, rendered, longest, keyed, relaid = [], [], [], [], []
                for _ in range(runs):
                    started = time.perf_counter()
                    page.goto(f"{web.base}/s/{SESSION_ID}")
                    page.locator(f"body[data-last-seq='{events - 1}']").wait_for(
                        state="attached", timeout=60_000
                    )
                    rendered.append(time.perf_counter() - started)
                    fcp = page.evaluate(
                        "performance.getEntriesByName('first-contentful-paint')[0]?.startTime"
                    )
                    first_paints.append(fcp / 1000)
                    longest.append(page.evaluate("Math.max(0, ...window.benchLongTasks)") / 1000)
                    keyed.append(page.evaluate(KEY_TO_PAINT) / 1000)
                    relaid.append(page.evaluate(RELAYOUT) / 1000)
                browser.close()
        finally:
            web.stop()
    print(f"session page of {events} events, first contentful paint: {spread(first_paints)}")
    print(f"  … every record rendered: {spread(rendered)}  (target: first paint ≤ 1000 ms)")
    print(f"  … the longest task while it loaded: {spread(longest)}")
    print(f"  … then a key typed in the prompt box → painted: {spread(keyed)}")
    print(f"  … the whole page laid out again (a new text size) → painted: {spread(relaid)}")


LONG_TASKS = """
window.benchLongTasks = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.benchLongTasks.push(entry.duration);
}).observe({type: "longtask", buffered: true});
"""
"""Records how long each task over 50 ms held the page's main thread."""

KEY_TO_PAINT = """
new Promise((resolve) => {
  const box = document.getElementById("prompt");
  box.focus();
  const started = performance.now();
  box.value += "x";
  box.dispatchEvent(new InputEvent("input", {bubbles: true, data: "x"}));
  requestAnimationFrame(() => setTimeout(() => resolve(performance.now() - started), 0));
})
"""
"""A key typed in the prompt box → the frame that shows it painted (ms)."""

RELAYOUT = """
new Promise((resolve) => {
  const started = performance.now();
  document.body.style.fontSize = document.body.style.fontSize === "15px" ? "14px" : "15px";
  document.getElementById("transcript").scrollTop = 0; // the page's own scroll forces layout
  requestAnimationFrame(() => setTimeout(() => resolve(performance.now() - started), 0));
})
"""
"""Every line wraps anew (as when a phone turns), the transcript scrolled to its top →
the frame painted (ms)."""


def write_sessions(home: Path, count: int) -> None:
    """Store ``count`` sessions of a few turns each under ``home``: one written by tether,
    then copied under other ids, directories and prompts (the files backend's format)."""
    asyncio.run(write_session(home, 120, "jsonl"))
    directory = home / "sessions"
    header, rest = (directory / f"{SESSION_ID}.jsonl").read_text().split("\n", 1)
    record = json.loads(header)
    for index in range(count - 1):
        session_id = f"listed-{index:05d}"
        record["header"]["id"] = session_id
        record["header"]["cwd"] = f"/srv/project-{index % 12}"
        body = rest.replace('"question ', f'"task {index} question ')
        (directory / f"{session_id}.jsonl").write_text(json.dumps(record) + "\n" + body)


def bench_listing(runs: int, sessions: int) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        write_sessions(home, sessions)
        web = Web(home)
        listing = f"{web.base}/api/sessions"
        try:
            web.serving()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_context().new_page()
                shown = []
                for run in range(runs + 1):
                    page.goto(web.url)  # the first visit after the start is the cold one
                    page.locator("body[data-listed]").wait_for(state="attached")
                    shown.append(page.evaluate(LISTED_AFTER) / 1000)
                    while run == 0 and httpx.get(listing, headers=web.headers).json()["pending"]:
                        pass  # each listing folds more figures, until all are
                rows = page.locator("#sessions tbody tr").count()
                browser.close()
            whole, search = [], []
            with httpx.Client(base_url=web.base, headers=web.headers, timeout=60) as client:
                for _ in range(runs):
                    started = time.perf_counter()
                    listed = client.get("/api/sessions", params={"limit": str(sessions)}).json()
                    whole.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    client.get("/api/sessions", params={"q": "task 517 question"})
                    search.append(time.perf_counter() - started)
        finally:
            web.stop()
    assert listed["total"] == sessions and listed["pending"] == 0, listed["total"]
    print(
        f"sessions page over {sessions} sessions, navigation → first {rows} rows shown: "
        f"first visit after a start {shown[0] * 1000:.1f} ms; then (every figure folded) "
        f"{spread(shown[1:])}"
        "  (target ≤ 500 ms)"
    )
    print(f"  … GET /api/sessions of all {sessions}: {spread(whole)}")
    print(f"  … a search in titles and prompts: {spread(search)}")


LISTED_AFTER = """
performance.getEntriesByName("tether-listed").at(-1).startTime
  - performance.getEntriesByType("navigation")[0].startTime
"""
"""Milliseconds from the navigation's start to the rows shown (the page marks it)."""


def bench_live(prompts: int) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        web = Web(Path(tmp))
        try:
            web.serving()
            created = httpx.post(
                f"{web.base}/api/sessions",
                json={"cwd": tmp, "mode": "auto"},
                headers=web.headers,
            ).json()["id"]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(bypass_csp=True)  # to read the page's figures
                page = context.new_page()
                page.goto(web.url)
                page.goto(f"{web.base}/s/{created}")
                page.locator("body[data-connected=true]").wait_for(state="attached")
                for turn in range(1, prompts + 1):
                    httpx.post(
                        f"{web.base}/api/sessions/{created}/prompt",
                        json={"text": f"$ seq 1 40; echo turn-{turn}"},
                        headers=web.headers,
                    )
                    page.locator(".turn-end").nth(turn - 1).wait_for()
                page.wait_for_timeout(100)
                lag = page.evaluate("window.tetherLag")
                browser.close()
        finally:
            web.stop()
    lag.sort()
    p90 = lag[int(len(lag) * 0.9)]
    print(
        f"live record → painted: median {statistics.median(lag):.1f} ms, p90 {p90:.1f} ms, "
        f"max {lag[-1]:.1f} ms over {len(lag)} records  (target: median ≤ 50 ms)"
    )


async def follow(client: httpx.AsyncClient, session_id: str, after: int, turns: int) -> None:
    """Read a session's stream until ``turns`` more turns have ended."""
    seen = 0
    url = f"/api/sessions/{session_id}/events"
    async with client.stream("GET", url, params={"after": str(after)}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"type":"turn/end"' in line:
                seen += line.count('"type":"turn/end"')
                if seen >= turns:
                    return


async def cpu_for(web: Web, session_id: str, followers: int, turns: int) -> float:
    async with httpx.AsyncClient(base_url=web.base, headers=web.headers, timeout=60) as client:
        shown = (await client.get(f"/api/sessions/{session_id}")).json()
        after = shown["events"] - 1
        readers = [
            asyncio.ensure_future(follow(client, session_id, after, turns))
            for _ in range(followers)
        ]
        await asyncio.sleep(0.3)  # let every stream attach
        before = web.cpu_seconds()
        for turn in range(turns):
            await client.post(
                f"/api/sessions/{session_id}/prompt",
                json={"text": f"$ seq 1 200; echo batch-{turn}"},
            )
        await asyncio.gather(*readers)
        return web.cpu_seconds() - before


async def memory_per_follower(web: Web, session_id: str, followers: int) -> float:
    async with httpx.AsyncClient(
        base_url=web.base,
        headers=web.headers,
        timeout=60,
        limits=httpx.Limits(max_connections=followers + 10),
    ) as client:
        await asyncio.sleep(0.5)
        before = web.rss_kib()
        attached = asyncio.Event()
        count = 0

        async def idle() -> None:
            nonlocal count
            url = f"/api/sessions/{session_id}/events"
            async with client.stream("GET", url, params={"after": "1000000"}) as response:
                count += 1
                if count == followers:
                    attached.set()
                async for _ in response.aiter_lines():
                    pass

        tasks = [asyncio.ensure_future(idle()) for _ in range(followers)]
        await attached.wait()
        await asyncio.sleep(0.5)
        after = web.rss_kib()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return (after - before) / followers


def bench_tabs(runs: int, tabs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        web = Web(Path(tmp))
        try:
            web.serving()
            session_id = httpx.post(
                f"{web.base}/api/sessions", json={"cwd": tmp, "mode": "auto"}, headers=web.headers
            ).json()["id"]
            one, many = [], []
            for _ in range(runs):
                one.append(asyncio.run(cpu_for(web, session_id, 1, TURNS)))
                many.append(asyncio.run(cpu_for(web, session_id, tabs, TURNS)))
            per_tab = asyncio.run(memory_per_follower(web, session_id, 100))
        finally:
            web.stop()
    ratios = [m / o for o, m in zip(one, many, strict=True)]
    print(f"server CPU for {TURNS} turns, 1 follower: {spread(one)}")
    print(f"server CPU for {TURNS} turns, {tabs} followers: {spread(many)}")
    print(
        f"  ratio {tabs} / 1: median {statistics.median(ratios):.2f}x, "
        f"range {min(ratios):.2f}-{max(ratios):.2f}x  (target ≤ 1.2x)"
    )
    print(f"server memory per attached follower: {per_tab:.0f} KiB  (target ≤ 200 KB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--tabs", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--only", default="start,paint,listing,live,tabs")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if "start" in only:
        bench_start(args.runs)
    if "paint" in only:
        bench_paint(args.runs, args.events)
    if "listing" in only:
        bench_listing(args.runs, args.sessions)
    if "live" in only:
        bench_live(args.runs)
    if "tabs" in only:
        bench_tabs(args.runs, args.tabs)


if __name__ == "__main__":
    main()
