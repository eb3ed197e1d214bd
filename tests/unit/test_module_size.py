"""Modules stay small: a module of streamcore/, jobs/, dags/ or plugins/ over 600 lines says why at
its top, in a paragraph of its docstring that starts "Kept whole (over 600 lines):".
"""

from __future__ import annotations

import ast

from streamcore.config import project_root

LIMIT = 600
MARK = "Kept whole (over 600 lines):"
FOLDERS = ("streamcore", "jobs", "dags", "plugins")
# The log backends are being reorganised into one template (issue 26, section 1), which moves and
# splits these modules; they join the rule when that lands.
NOT_YET = ("streamcore/log/",)


def test_every_module_over_the_limit_says_why_it_stays_whole() -> None:
    root = project_root()
    unexplained = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            text = path.read_text()
            if name.startswith(NOT_YET) or text.count("\n") <= LIMIT:
                continue
            if MARK not in (ast.get_docstring(ast.parse(text)) or ""):
                unexplained.append(f"{name} ({text.count(chr(10))} lines)")
    assert unexplained == []
