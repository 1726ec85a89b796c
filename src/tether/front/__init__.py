"""The front layer: what ACP, the web app and the terminal share, under all three.

* :mod:`tether.front.host` — the session host: the sessions a front end owns,
  publish-or-dispose, one memoized close, the governing session of any agent,
  the before-execute path (preview once, mode, approve);
* :mod:`tether.front.asking` — the question asker: grants from the session's
  settings, timeout, withdraw on cancel, a logged "always"; a front end only
  presents the question;
* :mod:`tether.front.seams` — the seams a front end answers (file access, the
  client's terminals), so that no front end imports a plugin;
* :mod:`tether.front.follow` — the session view: a session's events after a
  seq, then live, with no gap and no duplicate; a turn followed in the log;
* :mod:`tether.front.prompting` — typed text made a slash command run or a
  prompt with the MCP resources its ``@server:uri`` words name; the commands
  and resources a session offers.

Nothing is imported here, so a front end loads only what it uses.
"""
