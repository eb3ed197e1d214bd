"""Credentials out of text that is shown: `https://user:secret@host` -> `https://user:***@host`,
and `{"sasl.password": "secret"}` -> `{"sasl.password": "***"}`.

Every URL that may carry a password (the schema registry's) goes through `redact_credentials`
before it reaches an error message, a log line or a repr; every Kafka client property table (a
kafka log config's `properties`, a `KafkaLogDescription`) goes through `redact_properties` before
it reaches a repr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "is_secret_property", "redact_credentials", "redact_properties"]

REDACTED = "***"
# scheme://user: then the password up to the last "@" before the host (a password may hold "@"
# or ":"; a "/" or whitespace ends the authority).
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)[^/\s]*@")
# Kafka client properties whose value is a secret: sasl.password, ssl.key.password,
# ssl.keystore.password, sasl.oauthbearer.client.secret, sasl.jaas.config (holds the password),
# sasl.oauthbearer.config, ssl.key.pem (a private key), ... The user name stays shown.
_SECRET_PROPERTY = re.compile(
    r"(?i)password|secret|token|credential|jaas|oauthbearer\.config|key\.pem"
)


def redact_credentials(text: str) -> str:
    """`text` with the password of every URL in it replaced by `***` (the user stays, to tell
    which account was used)."""
    return _USERINFO.sub(r"\g<head>***@", text)


def is_secret_property(key: str) -> bool:
    """Whether the Kafka client property `key` holds a secret (a password, a token, a key)."""
    return bool(_SECRET_PROPERTY.search(key))


def redact_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the client `properties` with every secret value (`is_secret_property`) replaced
    by `***`, for reprs and messages."""
    return {k: REDACTED if is_secret_property(str(k)) else v for k, v in properties.items()}
