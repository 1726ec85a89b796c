"""A stdio MCP server that ignores SIGTERM and has children that do too:
``python stubborn_server.py PIDFILE [--stay]``.

Before it answers anything it starts a child that holds 100 MB and forks
seven copies of itself, so that the kernel takes some milliseconds to end
them all once they are killed; they keep no pipe of the server's open. When
every one of them is ready the server writes the pids (its own first) to
PIDFILE, one a line. Then it is ``raw_server.py --good``, and it exits when
its stdin closes — or, with ``--stay``, it stays until it is killed.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

COPIES = 8

CHILD = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
held = b"1" * 100_000_000
for _ in range(COPIES - 1):
    if os.fork() == 0:
        break
os.write(1, b"%d\\n" % os.getpid())
time.sleep(3600)
"""

signal.signal(signal.SIGTERM, signal.SIG_IGN)
stay = "--stay" in sys.argv
child = subprocess.Popen(
    [sys.executable, "-c", f"COPIES = {COPIES}\n{CHILD}"],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE,
    stderr=subprocess.DEVNULL,
)
assert child.stdout is not None
pids = [os.getpid(), *(int(child.stdout.readline()) for _ in range(COPIES))]
child.stdout.close()
Path(sys.argv[1]).write_text("\n".join(map(str, pids)))
sys.argv[1:] = ["--good"]
runpy.run_path(str(Path(__file__).with_name("raw_server.py")), run_name="__main__")
while stay:
    time.sleep(3600)
