"""What a config's records show of its credentials: one masking, by field name and by value.

Every writer of a config (``config.yaml``, ``trinity config check``, the trackers' copy, the check's
messages) goes through ``config.model_dump(mode="json")``, whose serializer (``ConfigModel``) applies
``mask_secrets`` to every field: a field or key named like a credential (``api_key``, ``token``,
``password``, ``secret``, ...; not ``api_key_env``, ``max_tokens``) shows ``<hidden>``; in any
string a URL's password and a credential-named parameter (``?sslpassword=``, libpq ``password=``)
show ``***``. So a new field cannot be forgotten. Empty values and ``EMPTY`` show as they are; only
the records are masked, the run uses the values."""

from __future__ import annotations

import functools
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HIDDEN = "<hidden>"
"""What a credential-named field shows."""

MASK = "***"
"""What a password in a URL, or a credential-named parameter in a string, shows."""

NO_SECRET = ("", "EMPTY")
"""Values that mean "no key" (shown as they are)."""

_WHOLE_WORDS = {"password", "passwd", "pwd", "secret", "secrets", "token", "credential", "credentials", "apikey"}
_PAIRS = {("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"), ("auth", "key")}
_SUBSTRINGS = ("password", "passwd", "secret", "apikey", "credential")
_POINTERS = {"env", "path", "file", "dir", "name", "id", "ids", "type", "len", "length", "num", "count", "size"}
"""Last words of names that hold where a credential is (a variable's name, a file), not one."""
_NOT_CREDENTIALS = {"eos", "bos", "pad", "unk", "sep", "cls", "mask", "special", "stop", "image", "video", "audio"}
"""Words before ``token`` in names of tokenizer tokens (``eos_token``), which are no secrets."""


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[^a-zA-Z0-9]+", spaced.lower()) if w]


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """Whether a field, mapping key or URL parameter called ``name`` holds a credential."""
    words = _words(name)
    if not words or words[-1] in _POINTERS:
        return False
    if any(s in w for w in words for s in _SUBSTRINGS):
        return True
    for i, word in enumerate(words):
        if word == "token" and i == len(words) - 1 and not (i and words[i - 1] in _NOT_CREDENTIALS):
            return True
        if word in _WHOLE_WORDS - {"token"}:
            return True
    return any(pair in _PAIRS for pair in zip(words, words[1:], strict=False))


_PARAMETER = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P<eq>\s*=\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^&;\s]+)"
)
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
"""Both match from the start of a word only: linear in the text's length, however long."""


def mask_text(text: str) -> str:
    """``text`` with every URL password and credential-named ``name=value`` parameter as ``***``."""
    if "=" in text:
        text = _PARAMETER.sub(
            lambda m: f"{m['name']}{m['eq']}{MASK}" if secret_name(m["name"]) and m["value"] != MASK else m[0], text
        )
    return _URL.sub(lambda m: _mask_url(m[0]), text) if "://" in text else text


def _mask_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password or password == MASK:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:{MASK}@{host}"))


def mask_secrets(value: Any, name: str | None = None) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) as a config's records show it, ``name``
    the field or key that holds it."""
    if isinstance(value, dict):
        return {key: mask_secrets(item, str(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_secrets(item, name) for item in value]
    if isinstance(value, str):
        if name is not None and secret_name(name) and value not in NO_SECRET:
            return HIDDEN
        return mask_text(value)
    return value
