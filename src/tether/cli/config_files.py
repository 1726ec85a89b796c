"""``tether config path`` and ``tether config init``: where things live, and a starting config.

The user configuration is an overlay of the built-in composition at
``$TETHER_HOME/tether.yml`` (see ``docs/cli.md``, "The composition and
overlays"). ``config init`` writes a commented one, mode 0600, and never
replaces an existing file unless asked to.
"""

from __future__ import annotations

import argparse
import os
import sys

from tether.cli.boot import data_dir_of

EXIT_OK = 0
EXIT_FAILED = 1

TEMPLATE = """\
# tether's user configuration: an overlay on the built-in composition.
# A row patches the built-in row with the same id, or adds a plugin;
# `tether config show` prints the result, and docs/cli.md explains it.
# Uncomment what you want (keep the two-space indent under `plugins:`).
plugins:
  # The model, as PROVIDER:MODEL (docs/models.md). Its key comes from the
  # environment: DEEPSEEK_API_KEY, ANTHROPIC_API_KEY, OPENAI_API_KEY, ...
  # - id: agent_loop
  #   config:
  #     model: deepseek:deepseek-chat
  #     max_steps: 50
  #     max_turn_output: 1000000   # characters of model output one turn may stream

  # Sessions in one SQLite database instead of one JSONL file each:
  # - id: persistence
  #   plugin: tether.persist.sqlite

  # Retry failed model requests (rate limits, overloaded providers; a
  # timed-out or stalled answer is retried timeout_attempts - 1 times):
  # - id: retry
  #   plugin: tether.loop.retry
  #   config: {max_attempts: 5, base_delay: 1.0, timeout_attempts: 2}

  # How long an answer may take to begin (a local server processing a long
  # prompt sends nothing), and then stall (no new text, reasoning or tool
  # call), per adapter plugin (tether.llm.adapters.anthropic likewise):
  # - id: openai
  #   plugin: tether.llm.adapters.openai
  #   config: {first_byte_timeout: 600, idle_timeout: 120, read_timeout: 120}
"""
"""What ``config init`` writes: every example commented out, so it changes nothing yet."""


def config_path(args: argparse.Namespace) -> int:
    data = data_dir_of(args)
    user = data / "tether.yml"
    state = "present" if user.is_file() else "absent; `tether config init` writes one"
    print(f"config    {user} ({state})")
    for extra in args.config or []:
        print(f"overlay   {extra}")
    print(f"data      {data}")
    print(f"sessions  {data / 'sessions'} (JSONL) or {data / 'sessions.sqlite3'} (SQLite)")
    return EXIT_OK


def config_init(args: argparse.Namespace) -> int:
    data = data_dir_of(args)
    user = data / "tether.yml"
    if user.exists() and not args.force:
        print(f"tether: {user} exists; --force replaces it", file=sys.stderr)
        return EXIT_FAILED
    try:
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = user.with_name(f".{user.name}.{os.getpid()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, TEMPLATE.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, user)
    except OSError as exc:
        print(f"tether: {user} could not be written: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {user}", file=sys.stderr)
    return EXIT_OK
