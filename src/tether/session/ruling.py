"""``permission/ruled``: what the permission rules decided about one tool call, and why.

Written right before the call would run, when a rule of the session's
``allow``, ``ask`` or ``deny`` lists spoke of it (see
:mod:`tether.front.rules`), or a rule the session kept with "always allow"
(``permission/granted``) allowed it::

    {"call": "call-3", "tool": "bash", "decision": "deny",
     "rules": ["Bash(rm:*)"]}
    {"call": "call-4", "tool": "bash", "decision": "allow",
     "rules": ["Bash(git status:*)", "Bash(git diff:*)"]}
    {"call": "call-5", "tool": "edit", "decision": "ask",
     "rules": ["Edit(docs/**)"], "answer": "allow"}

``decision`` is the rules' verdict; for ``ask`` the ``answer`` says what
came of the question (``allow``, ``reject``, or ``unanswered`` when no one
here could be asked). ``rules`` are the rules as written that made it (for
a bash call allowed command by command, one per command). A call no rule
spoke of has none: the session's mode decided. Not model-visible. It is part
of the core vocabulary: a log holding it loads without the plugin that wrote
it.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

import msgspec

from tether.session.fields import as_tuple, bad_field, check_choice, check_id
from tether.session.payload import EventStruct

__all__ = ["PermissionRuled", "RuledAnswer", "RuledDecision"]

RuledDecision = Literal["allow", "ask", "deny"]
RuledAnswer = Literal["allow", "reject", "unanswered"]
_TYPE = "permission/ruled"
_DECISIONS: tuple[str, ...] = get_args(RuledDecision)
_ANSWERS: tuple[str, ...] = get_args(RuledAnswer)


class PermissionRuled(EventStruct, frozen=True, omit_defaults=True):
    """The rules' verdict on the call ``call`` (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    call: str
    tool: str
    decision: RuledDecision
    rules: tuple[str, ...]
    answer: RuledAnswer | None = None

    def __post_init__(self) -> None:
        check_id(_TYPE, "call", self.call)
        check_id(_TYPE, "tool", self.tool)
        check_choice(_TYPE, "decision", self.decision, _DECISIONS)
        rules = as_tuple(_TYPE, "rules", self.rules)
        if not rules or not all(isinstance(rule, str) and rule for rule in rules):
            raise bad_field(_TYPE, "rules", "a non-empty list of non-empty str", rules)
        msgspec.structs.force_setattr(self, "rules", rules)
        if self.answer is not None:
            check_choice(_TYPE, "answer", self.answer, _ANSWERS)
