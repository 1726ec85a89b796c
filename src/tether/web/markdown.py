"""An answer's Markdown as the page shows it: parsed, highlighted and sanitized on the
server, once per answer.

:func:`to_html` parses CommonMark with tables (markdown-it-py), with raw HTML off:
the model's ``<script>`` or ``<img onerror>`` is text, never markup. A fenced block
in a language Pygments knows is highlighted with classes (the page's
``highlight.css``: the CSP allows no inline style). Images become links: a page
that loads what the model names would tell a third party it was read. Then nh3
(the Rust ``ammonia`` sanitizer) keeps only the tags and attributes below, links
only to ``http``, ``https`` and ``mailto``, opened in a new tab with
``rel="noopener noreferrer"`` (the session's page stays where it is): a
second fence, should the parser ever let markup through.

markdown-it-py, Pygments and nh3 are imported by the first answer rendered, never
by tether's start-up.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML
    from markdown_it.token import Token
    from markdown_it.utils import EnvType, OptionsDict

TAGS = frozenset(
    {
        *("p", "br", "hr", "blockquote", "ul", "ol", "li", "strong", "em", "code", "pre", "a"),
        *("h1", "h2", "h3", "h4", "h5", "h6", "span", "div"),
        *("table", "thead", "tbody", "tr", "th", "td", "s", "del"),
    }
)
"""The tags an answer may hold once sanitized."""

ATTRIBUTES = {
    "a": {"href", "title"},
    "span": {"class"},
    "code": {"class"},
    "pre": {"class"},
    "div": {"class"},
    "ol": {"start"},
}
"""The attributes kept, by tag (classes for highlighting; no ``style``: the CSP forbids it)."""

URL_SCHEMES = frozenset({"http", "https", "mailto"})

MAX_HIGHLIGHTED = 20_000
"""The longest fenced block highlighted (characters); a longer one is plain text: Pygments
takes about 0.3 ms a line, and an answer is rendered on the server's event loop."""


def to_html(text: str) -> str:
    """``text`` (an answer's Markdown) as sanitized HTML (see the module docs)."""
    import nh3

    rendered = _parser().render(text)
    return nh3.clean(
        rendered,
        tags=set(TAGS),
        attributes={tag: set(names) for tag, names in ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer",
        set_tag_attribute_values={"a": {"target": "_blank"}},
    )


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False, "highlight": _highlight}).enable("table")
    parser.enable("strikethrough")
    parser.add_render_rule("image", _image_as_link)
    return parser


def _highlight(code: str, language: str, _attrs: str) -> str:
    """A fenced block's code highlighted by Pygments when it knows ``language`` (and the
    block is at most :data:`MAX_HIGHLIGHTED` long); ``""`` lets markdown-it escape it as
    plain text."""
    if not language or len(code) > MAX_HIGHLIGHTED:
        return ""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(language)
    except ClassNotFound:
        return ""
    formatter = HtmlFormatter(nowrap=True)
    body = highlight(code, lexer, formatter)
    named = html.escape(language)
    return f'<pre class="highlight"><code class="language-{named}">{body}</code></pre>\n'


@functools.cache
def highlight_css() -> str:
    """The stylesheet of highlighted code: Pygments' ``default`` style, and
    ``github-dark`` where the system asks for a dark theme."""
    from pygments.formatters import HtmlFormatter

    def defs(style: str) -> str:
        # The stubs leave get_style_defs untyped; it returns the rules as one string.
        made = cast("Callable[[str], str]", HtmlFormatter(style=style).get_style_defs)
        return made(".highlight")

    light, dark = defs("default"), defs("github-dark")
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"


def _image_as_link(
    self: RendererHTML, tokens: list[Token], index: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[index]
    source = html.escape(str(token.attrGet("src") or ""))
    label = html.escape(self.renderInlineAsText(token.children or [], options, env) or source)
    return f'<a href="{source}">image: {label}</a>'
