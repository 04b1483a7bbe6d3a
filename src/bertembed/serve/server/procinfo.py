"""What Linux's /proc says about the service's processes: workers, memory, open connections.

Used by ``compare.py`` and the tests. Memory figures are bytes:

- ``Rss``: pages of the process in RAM; ``Pss`` (proportional set size):
  each of those pages divided by the number of processes that map it, so the
  PSS of all processes adds up to the RAM they use; ``Private_*``: pages only
  this process maps.
- :func:`file_mapping` gives the same fields for one mapped file, e.g. the
  checkpoint that bertembed maps: its PSS in one of W workers that all read
  the whole table is about table size / W.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Fields of smaps / smaps_rollup that are summed, in bytes.
FIELDS = ("Rss", "Pss", "Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty", "Anonymous", "Swap")


def children(pid: int) -> list[int]:
    """Process ids of the children of ``pid`` (all its threads' children).

    Examples
    --------
    >>> all(isinstance(pid, int) for pid in children(os.getpid()))
    True
    """
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:  # the thread exited meanwhile
            continue
    return sorted(found)


def _fields(lines: list[str]) -> dict[str, int]:
    totals = dict.fromkeys(FIELDS, 0)
    for line in lines:
        key, _, rest = line.partition(":")
        if key in totals:
            totals[key] += int(rest.split()[0]) * 1024  # kB
    return totals


def memory(pid: int) -> dict[str, int]:
    """Rss, Pss, Private_* ... of the whole process (``/proc/PID/smaps_rollup``), in bytes.

    Examples
    --------
    >>> memory(os.getpid())["Pss"] > 0
    True
    """
    return _fields(Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines())


def file_mapping(pid: int, path: str | os.PathLike[str]) -> dict[str, int]:
    """The :data:`FIELDS` of every mapping of the file ``path`` in ``pid``, summed, in bytes.

    Returns zeros (and ``mappings`` 0) when the file is not mapped.
    """
    target = os.path.realpath(path)
    lines: list[str] = []
    count, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's header line
            inside = len(head) == 6 and head[5] == target
            count += inside
        elif inside:
            lines.append(line)
    return {**_fields(lines), "mappings": count}


def tcp_connections(pid: int, port: int) -> int:
    """Open TCP connections of ``pid`` whose local port is ``port`` (listening sockets excluded).

    For a server worker, each one is a client connection it accepted: with
    one request per connection, the requests it holds.
    """
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port and cols[3] != "0A" and cols[9] in inodes:  # 0A = LISTEN
                count += 1
    return count
