"""``tether web``: watch, steer and stop live sessions in a browser.

One concern per module (every view reads a session through the front
layer's session view, :mod:`tether.front.follow`):

* :mod:`tether.web.hub` — the ``web`` plugin: the sessions the web app opened,
  prompts, the one stop, permission questions, background tasks behind the
  owner fence;
* :mod:`tether.web.security` — the access token, the origin check and the
  Content-Security-Policy, as ASGI middleware;
* :mod:`tether.web.usage` — tokens and cost of each turn;
* :mod:`tether.web.app` — the Starlette app: pages, the JSON API, the event
  stream (Server-Sent Events), the OpenAPI document;
* ``static/`` — the front end: plain HTML, CSS and JavaScript, no build step.

Starlette and uvicorn are imported only here, and only ``tether web`` imports
this package (see docs/web.md).
"""
