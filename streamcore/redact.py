"""Credentials out of text that is shown: `https://user:secret@host` -> `https://user:***@host`.

Every URL that may carry a password (the schema registry's) goes through `redact_credentials`
before it reaches an error message, a log line or a repr.
"""

from __future__ import annotations

import re

__all__ = ["redact_credentials"]

# scheme://user: then the password up to the last "@" before the host (a password may hold "@"
# or ":"; a "/" or whitespace ends the authority).
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)[^/\s]*@")


def redact_credentials(text: str) -> str:
    """`text` with the password of every URL in it replaced by `***` (the user stays, to tell
    which account was used)."""
    return _USERINFO.sub(r"\g<head>***@", text)
