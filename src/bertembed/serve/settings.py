"""Every setting of the server, declared once: its name, environment variable, option, default and meaning.

``bertembed serve`` turns its options into these environment variables
(:func:`environment`), the app and the worker read them (:func:`read`),
``GET /info`` lists the limits, and the server page of the documentation
shows the table this module prints (``python -m bertembed.serve.settings``).
Standard library only: importing it loads none of the server's packages.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One setting.

    Attributes
    ----------
    name : str
        Its name in Python and in ``/info``.
    env : str
        The environment variable that sets it.
    default : int, float, bool, str or None
        Its value when the variable is unset or empty (None: computed where it is used, see `meaning`).
    meaning : str
        What it bounds or chooses, for ``--help`` and the documentation.
    option : bool
        Whether ``bertembed serve`` has an option for it (``--`` + name with dashes).
    limit : bool
        Whether ``/info`` lists it under ``limits``.
    kind : type
        How the variable's text is read (int, float, bool or str).
    zero : bool
        Whether 0 is allowed (numbers are otherwise positive).
    """

    name: str
    env: str
    default: int | float | bool | str | None
    meaning: str
    option: bool = False
    limit: bool = True
    kind: type = int
    zero: bool = False

    @property
    def flag(self) -> str:
        """The ``bertembed serve`` option: ``--max-batch-tokens``."""
        return "--" + self.name.replace("_", "-")


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "threads",
        "SERVICE_THREADS",
        None,
        "ONNX Runtime threads per worker (default: usable cores // workers)",
        option=True,
        limit=False,
    ),
    Setting("batch_size", "SERVICE_BATCH_SIZE", 32, "most texts in one encoder call", option=True),
    Setting(
        "max_batch_tokens",
        "SERVICE_MAX_BATCH_TOKENS",
        4096,
        "most padded tokens in one encoder call and one batcher step (bounds a worker's memory)",
        option=True,
    ),
    Setting(
        "max_wait_ms",
        "SERVICE_MAX_WAIT_MS",
        2.0,
        "how long a free batcher waits for more requests (0: not at all)",
        option=True,
        limit=False,
        kind=float,
        zero=True,
    ),
    Setting(
        "immediate",
        "SERVICE_IMMEDIATE",
        True,
        "a request alone in its worker that fits one encoder call runs it on the tokenizer thread at once "
        "(no hand-off to the batcher, no wait)",
        limit=False,
        kind=bool,
    ),
    Setting("max_batch", "SERVICE_MAX_BATCH", 2048, "most inputs in one request (OpenAI's limit)", option=True),
    Setting(
        "max_request_tokens",
        "SERVICE_MAX_REQUEST_TOKENS",
        65536,
        "most tokens in one request, counted before any work is queued",
        option=True,
    ),
    Setting(
        "max_queue_tokens",
        "SERVICE_MAX_QUEUE_TOKENS",
        262144,
        "tokens waiting in a worker before new requests get 429",
        option=True,
    ),
    Setting(
        "max_body_bytes",
        "SERVICE_MAX_BODY_BYTES",
        4 << 20,
        "request body size; a declared larger body gets 413 before it is read",
        option=True,
    ),
    Setting(
        "max_concurrent_requests",
        "SERVICE_MAX_CONCURRENT_REQUESTS",
        512,
        "requests in progress in a worker before new ones get 429",
        option=True,
    ),
    Setting(
        "max_connections",
        "SERVICE_MAX_CONNECTIONS",
        None,
        "open connections in a worker; beyond, a new one closes the oldest with no request in progress "
        "(default: a quarter of the open-file limit, at most 1024)",
        option=True,
    ),
    Setting(
        "header_timeout_s",
        "SERVICE_HEADER_TIMEOUT_S",
        10.0,
        "seconds a connection may take to send a request's headers (else closed)",
        option=True,
        kind=float,
    ),
    Setting(
        "body_timeout_s",
        "SERVICE_BODY_TIMEOUT_S",
        30.0,
        "seconds a request may take to send its body (else 408)",
        option=True,
        kind=float,
    ),
    Setting("keep_alive_s", "SERVICE_KEEP_ALIVE_S", 5, "seconds an idle keep-alive connection is kept", option=True),
    Setting(
        "request_timeout_s",
        "SERVICE_REQUEST_TIMEOUT_S",
        120.0,
        "seconds a request may wait and compute before it gets 503 and its queued work is dropped",
        option=True,
        kind=float,
    ),
    Setting(
        "send_timeout_s",
        "SERVICE_SEND_TIMEOUT_S",
        30.0,
        "seconds an answer may wait for a client that does not read it (then the connection is dropped)",
        option=True,
        kind=float,
    ),
    Setting(
        "auto_truncate",
        "SERVICE_AUTO_TRUNCATE",
        True,
        "TEI requests without 'truncate' are truncated (else refused when too long)",
        limit=False,
        kind=bool,
    ),
    Setting(
        "forwarded_allow_ips",
        "SERVICE_FORWARDED_ALLOW_IPS",
        "",
        "proxies whose X-Forwarded-For is trusted, comma-separated (default: none)",
        option=True,
        limit=False,
        kind=str,
    ),
    Setting(
        "metrics_open",
        "SERVICE_METRICS_OPEN",
        False,
        "/metrics needs no API key even when one is set",
        limit=False,
        kind=bool,
    ),
    Setting("access_log", "SERVICE_ACCESS_LOG", True, "one line per request on stderr", limit=False, kind=bool),
    Setting(
        "model_name",
        "SERVICE_MODEL_NAME",
        "",
        "the name the OpenAI route answers to (default: the artifact's)",
        limit=False,
        kind=str,
    ),
    Setting("embed_threads", "SERVICE_EMBED_THREADS", 1, "bertembed's threads for the embedding step", limit=False),
    Setting(
        "arena",
        "SERVICE_ORT_ARENA",
        "shrink",
        "ONNX Runtime's CPU memory arena: shrink, on or off",
        limit=False,
        kind=str,
    ),
    Setting(
        "spinning",
        "SERVICE_ORT_SPINNING",
        "auto",
        "ONNX Runtime's intra-op threads spin while waiting for work: off, on, or auto (on when "
        "workers x threads <= usable cores; set off on a host busy with other work: it makes spinning slower)",
        limit=False,
        kind=str,
    ),
    Setting(
        "graph_optimization",
        "SERVICE_GRAPH_OPT",
        "all",
        "ONNX Runtime's graph optimisation level: all, extended or basic",
        limit=False,
        kind=str,
    ),
    Setting(
        "embedding",
        "SERVICE_EMBEDDING",
        "bertembed",
        "the embedding step: bertembed (torch: the comparison)",
        limit=False,
        kind=str,
    ),
    Setting(
        "shared_encoder",
        "SERVICE_SHARED_ENCODER",
        True,
        "the workers map one prepacked copy of the encoder's weights (written once per machine into the cache)",
        option=True,
        limit=False,
        kind=bool,
    ),
    Setting(
        "encoder_cache",
        "SERVICE_ENCODER_CACHE",
        "",
        "where shared encoders are written (default $XDG_CACHE_HOME/bertembed/encoders)",
        limit=False,
        kind=str,
    ),
    Setting("workers", "SERVICE_WORKERS", 1, "worker processes on this machine (bertembed serve sets it)", limit=False),
)
BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}


def _parse(setting: Setting, raw: str) -> Any:
    if setting.kind is bool:
        return raw.strip().lower() not in ("0", "false", "no", "off")
    try:
        value = setting.kind(raw)
    except ValueError:
        raise ValueError(f"{setting.env}={raw!r}: expected {setting.kind.__name__}") from None
    if setting.kind in (int, float) and (value < 0 or (value == 0 and not setting.zero)):
        raise ValueError(f"{setting.env}={raw!r}: must be {'at least 0' if setting.zero else 'positive'}")
    return value


def read(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every setting's value: the environment's, else its default.

    Raises
    ------
    ValueError
        A variable that does not parse, or a number that is not positive; the message names it.

    Examples
    --------
    >>> read({"SERVICE_MAX_BATCH": "32"})["max_batch"], read({})["max_batch"]
    (32, 2048)
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = env.get(setting.env, "")
        values[setting.name] = setting.default if raw == "" else _parse(setting, raw)
    return values


def default_max_connections() -> int:
    """A quarter of the soft open-file limit, at most 1024.

    The rest covers the worker's own files and the connections accepted in
    one burst before the oldest idle ones are closed (see
    :mod:`bertembed.serve.server.worker`).
    """
    if sys.platform == "win32":  # no open-file limit to read (and the server runs on POSIX only)
        return 1024
    import resource

    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 1024
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 1024
    return max(8, min(1024, soft // 4))


def environment(values: Mapping[str, Any]) -> dict[str, str]:
    """The environment variables for the given settings (by name; None values left out)."""
    out = {}
    for name, value in values.items():
        if value is None:
            continue
        setting = BY_NAME[name]
        out[setting.env] = ("1" if value else "0") if setting.kind is bool else str(value)
    return out


def table() -> str:
    """The settings as a Markdown table (the server page shows it)."""
    rows = ["| variable | option | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = "computed" if s.default is None else repr(s.default) if s.kind is str else str(s.default)
        rows.append(f"| `{s.env}` | {f'`{s.flag}`' if s.option else ''} | {default} | {s.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
