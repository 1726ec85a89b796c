"""The front layer: what ACP, the web app and the terminal share, under all three.

* :mod:`tether.front.follow` — the session view: a session's events after a
  seq, then live, with no gap and no duplicate; a turn followed in the log.

Nothing is imported here, so a front end loads only what it uses.
"""
