"""Markup in what the page shows stays text, in Debian's Chromium.

Over a hundred script-injection payloads reach the page every way text does: the
prompt (the user's message, the session's title, the sessions page's listing and
its search), the model's answer (the offline model says the prompt back, rendered
as Markdown on the server), and a command's output (a file of them, ``cat``). The
page must run none of them: no dialog, no ``window.pwned``, and no element of the
transcript or the listing with an event attribute, a script, a frame or a
``javascript:`` link.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tests.web import test_browser as page_tests
from tests.web.test_browser import Server, _new_session, _prompt, _turn_ended
from tests.web.test_markdown import PAYLOADS as MARKDOWN_PAYLOADS

server = page_tests.server
browser = page_tests.browser
context = page_tests.context

# Each runs `alert(1)` or sets window.pwned if it ever becomes markup.
_HANDLERS = [
    ("img src=x", "onerror"),
    ("svg", "onload"),
    ("body", "onload"),
    ("video src=x", "onerror"),
    ("audio src=x", "onerror"),
    ("input autofocus", "onfocus"),
    ("details open", "ontoggle"),
    ("iframe", "onload"),
    ("object data=x", "onerror"),
    ("select autofocus", "onfocus"),
    ("textarea autofocus", "onfocus"),
    ("embed src=x", "onerror"),
    ("link rel=stylesheet href=x", "onerror"),
    ("marquee", "onstart"),
    ("style", "onload"),
    ("div tabindex=0 autofocus", "onfocusin"),
    ("a href=#", "onmouseover"),
    ("math", "onclick"),
    ("source src=x", "onerror"),
    ("image src=x", "onerror"),
]
_SHAPES = [
    "<{tag} {event}=alert(1)>",
    '<{tag} {event}="window.pwned=1">',
    "<{tag}/{event}=alert(1)//>",
    "<{TAG} {EVENT}=alert(1)>",
]
_STRUCTURAL = [
    '"><script>alert(1)</script>',
    "'><img src=x onerror=alert(1)>",
    "</textarea><script>alert(1)</script>",
    "</title><script>alert(1)</script>",
    "</code></pre><script>alert(1)</script>",
    "<scr<script>ipt>alert(1)</scr</script>ipt>",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    '<iframe srcdoc="<script>parent.alert(1)</script>"></iframe>',
    '<meta http-equiv=refresh content="0;url=javascript:alert(1)">',
    "<base href=javascript:alert(1)//>",
    "<form action=javascript:alert(1)><button>go</button></form>",
    "<template><img src=x onerror=alert(1)></template>",
    "<svg><animate onbegin=alert(1) attributeName=x dur=1s>",
    '<img src="x\nonerror=alert(1)>',
    "<img src=x onerror=&#97;&#108;&#101;&#114;&#116;(1)>",
    "<a href=&#106;avascript:alert(1)>x</a>",
    '<a href="jav&#x09;ascript:alert(1)">x</a>',
    "<svg><script>alert(1)</script></svg>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "${alert(1)}",
    "{{constructor.constructor('alert(1)')()}}",
    "javascript:alert(1)",
    "<isindex action=javascript:alert(1) type=image>",
    "<xss id=x tabindex=1 onfocus=alert(1)></xss>",
    "<plaintext><img src=x onerror=alert(1)>",
]
PAYLOADS = [
    *MARKDOWN_PAYLOADS,
    *(
        shape.format(tag=tag, event=event, TAG=tag.upper(), EVENT=event.upper())
        for (tag, event), shape in itertools.product(_HANDLERS, _SHAPES)
    ),
    *_STRUCTURAL,
]

_INJECTED = """(selector) => {
  const found = [];
  for (const root of document.querySelectorAll(selector)) {
    for (const node of root.querySelectorAll("*")) {
      const tag = node.tagName.toLowerCase();
      if (["script", "iframe", "object", "embed", "base", "meta", "form"].includes(tag))
        found.push(tag);
      for (const attribute of node.attributes) {
        const value = attribute.value.replace(/\\s/g, "").toLowerCase();
        if (attribute.name.startsWith("on") || value.startsWith("javascript:"))
          found.push(tag + "[" + attribute.name + "]");
      }
    }
  }
  return found;
}"""
"""The elements under ``selector`` that markup from a payload would have made."""


def _watched(page: Any) -> list[str]:
    """What ran on ``page`` that should not have: dialogs opened (dismissed at once)."""
    ran: list[str] = []

    def dialog(shown: Any) -> None:
        ran.append(f"dialog: {shown.message}")
        shown.dismiss()

    page.on("dialog", dialog)
    return ran


def _check_nothing_ran(page: Any, ran: list[str], selector: str) -> None:
    page.wait_for_timeout(300)  # an onerror of an image fires once its load failed
    assert ran == []
    assert page.evaluate("window.pwned") is None
    assert page.evaluate(_INJECTED, selector) == []


def test_over_a_hundred_payloads_stay_text_in_every_place_the_page_shows_text(
    context: Any, server: Server, tmp_path: Path
) -> None:
    assert len(PAYLOADS) > 100
    text = "\n\n".join(PAYLOADS)
    (tmp_path / "payloads.txt").write_text(text + "\n")
    page = _new_session(context, server, tmp_path)
    ran = _watched(page)
    _prompt(page, text)
    _turn_ended(page)
    _prompt(page, "$ cat payloads.txt")
    _turn_ended(page, 2)
    transcript = page.locator("#transcript")
    shown = transcript.inner_text()
    for payload in ("<script>alert(1)</script>", "<svg onload=alert(1)>", "${alert(1)}"):
        assert payload in shown  # said as text, in the prompt, the answer or the output
    _check_nothing_ran(page, ran, "#transcript, header, title")
    assert page.errors == []

    listing = context.new_page()
    ran = _watched(listing)
    listing.goto(server.base + "/")
    listing.fill("#filter", "onerror")  # the search reads the prompts
    row = listing.locator("#sessions tbody tr", has_text="<script>alert(1)</script>")
    row.first.wait_for()
    _check_nothing_ran(listing, ran, "#sessions")
