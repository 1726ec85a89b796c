"""A paginated MCP listing is read page by page along its cursor, and one that never
ends is an error (tools/list and prompts/list share the reader)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tether.mcp.connection import _every_page
from tether.mcp.errors import McpStartError


@dataclass
class Page:
    items: list[int]
    next_cursor: str | None


async def test_every_page_is_read_along_the_cursor() -> None:
    asked: list[str | None] = []

    async def fetch(params: Any = None) -> Page:
        cursor = None if params is None else params.cursor
        asked.append(cursor)
        following = {None: "2", "2": "3", "3": None}[cursor]
        return Page([len(asked)], following)

    pages = await _every_page(fetch, "tools/list")
    assert [page.items for page in pages] == [[1], [2], [3]]
    assert asked == [None, "2", "3"]


async def test_a_listing_that_never_ends_is_an_error() -> None:
    async def fetch(params: Any = None) -> Page:
        return Page([], "again")

    with pytest.raises(McpStartError, match="its prompts/list did not end after 5 pages"):
        await _every_page(fetch, "prompts/list", limit=5)
