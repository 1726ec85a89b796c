"""An answer's Markdown as the page gets it: rendered on the server (CommonMark and
tables, code highlighted), sanitized, and nothing the model writes runs as markup."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from tether.web.markdown import MAX_HIGHLIGHTED, to_html

from .server import read_stream, served

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "![x](x) <img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](  javascript:alert(1))",
    "[click](data:text/html,<script>alert(1)</script>)",
    "[click](vbscript:msgbox(1))",
    "<javascript:alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "<svg onload=alert(1)>",
    "<iframe src=//evil.example></iframe>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "```html\n<script>alert(1)</script>\n```",
    "```\n<img src=x onerror=alert(1)>\n```",
    "    <script>alert(1)</script>",
    "`<script>alert(1)</script>`",
    "| a |\n|---|\n| <img src=x onerror=alert(1)> |",
    '[x](https://ok.example "title\\" onmouseover=\\"alert(1)")',
    "<details open ontoggle=alert(1)>",
    "*<b onclick=alert(1)>x</b>*",
]


class Markup(HTMLParser):
    """The elements and attributes of some HTML, as a browser would parse them."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {name: value or "" for name, value in attrs}))


SAFE_TAGS = {"p", "a", "pre", "code", "span", "table", "thead", "tbody", "tr", "th", "td"}
SAFE_TAGS |= {"em", "strong", "div"}
SAFE_ATTRIBUTES = {"href", "title", "class", "target", "rel"}


@pytest.mark.parametrize("payload", PAYLOADS)
def test_nothing_the_model_writes_becomes_markup_that_runs(payload: str) -> None:
    markup = Markup()
    markup.feed(to_html(payload))
    for tag, attributes in markup.elements:
        assert tag in SAFE_TAGS, (tag, attributes)
        assert set(attributes) <= SAFE_ATTRIBUTES, (tag, attributes)
        href = attributes.get("href", "").strip().lower()
        assert not href or href.startswith(("https:", "http:", "mailto:")) or ":" not in href
        if tag == "a":
            assert attributes["rel"] == "noopener noreferrer"


def test_commonmark_and_tables_are_rendered() -> None:
    html = to_html("# Title\n\n**bold** and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert "<h1>Title</h1>" in html
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert "<table>" in html and "<th>a</th>" in html and "<td>2</td>" in html


def test_a_fenced_block_is_highlighted_and_its_html_stays_text() -> None:
    html = to_html("```python\ndef f():\n    return '<b>'\n```")
    assert html.startswith('<pre class="highlight"><code class="language-python">')
    assert '<span class="k">def</span>' in html
    assert "&lt;b&gt;" in html and "<b>" not in html


def test_links_open_apart_with_noopener_and_images_become_links() -> None:
    html = to_html("[docs](https://example.org/x) ![logo](https://example.org/l.png)")
    assert '<a href="https://example.org/x" target="_blank" rel="noopener noreferrer">' in html
    assert "image: logo</a>" in html and "<img" not in html


async def test_an_answer_record_carries_its_rendered_markdown(tmp_path: Path) -> None:
    (tmp_path / "answer.md").write_text("**bold** and `tick`\n<script>alert(1)</script>\n")
    async with served(tmp_path / "home") as web:
        created = await web.client.post("/api/sessions", json={"cwd": str(tmp_path)})
        session_id = created.json()["id"]
        prompt = {"text": "$ cat answer.md"}
        await web.client.post(f"/api/sessions/{session_id}/prompt", json=prompt)
        got = await read_stream(web.client, session_id)
        css = await web.client.get("/static/highlight.css", headers={"Authorization": ""})
    answers = [r for r in got.records if r["type"] == "assistant/message" and "html" in r]
    html = str(answers[-1]["html"])
    assert "<strong>bold</strong>" in html and "<code>tick</code>" in html
    assert "&lt;script&gt;" in html and "<script" not in html
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert ".highlight .k" in css.text and "prefers-color-scheme: dark" in css.text


def test_a_block_too_long_to_highlight_is_plain_monospace_text() -> None:
    block = "x = 1\n" * (MAX_HIGHLIGHTED // 6 + 1)
    html = to_html(f"```python\n{block}```")
    assert html.startswith('<pre><code class="language-python">x = 1')
    assert "<span" not in html
