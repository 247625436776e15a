"""Whether a run stored as `running` still has a live owner: the status to show."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from llmscope.store.codec import is_null
from llmscope.store.schema import utc_now

# A same-host owner that is alive but has not beaten for this long is treated as gone
# (its pid was reused, or it hangs); an owner on another host is judged by its heartbeat only.
STALE_LOCAL_S = 600.0
STALE_REMOTE_S = 120.0


def _pid_alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def process_started_at(pid: int) -> dt.datetime | None:
    """When process `pid` of this host started (naive UTC), or None where that is unknown.

    Read from /proc/<pid>/stat (field 22, clock ticks after boot) and /proc/stat's `btime`
    on Linux; elsewhere from psutil when it is installed.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        # the command name (field 2) may hold spaces and parentheses: fields follow the last ")"
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return dt.datetime.fromtimestamp(btime + ticks / os.sysconf("SC_CLK_TCK"), dt.UTC).replace(
            tzinfo=None
        )
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    try:
        import psutil  # type: ignore[import-untyped]

        return dt.datetime.fromtimestamp(psutil.Process(pid).create_time(), dt.UTC).replace(
            tzinfo=None
        )
    except Exception:  # not installed, no such process, no access
        return None


# A process that started this long after the owner's last heartbeat cannot be the owner (it
# wrote that heartbeat while alive): the slack covers /proc/stat's whole-second boot time.
PID_REUSE_SLACK_S = 2.0


def _owner_alive(pid: int, last_beat: Any) -> bool:
    """Whether the run's owner, process `pid` on this host, still runs: the pid is in use and
    the process using it started before the owner's last recorded heartbeat (a recycled pid
    belongs to a process started after the owner died)."""
    if not _pid_alive(pid):
        return False
    if is_null(last_beat) or not isinstance(last_beat, dt.datetime):
        return True
    started = process_started_at(pid)
    return started is None or (started - last_beat).total_seconds() <= PID_REUSE_SLACK_S


def effective_status(rec: dict[str, Any], now: dt.datetime | None = None) -> str | None:
    """The status to show: a `running` run whose owner process is gone is `interrupted`
    (gone: no process has its pid, or the process with its pid started after its last beat)."""
    import socket

    status = rec.get("status")
    if status != "running":
        return status
    now = now or utc_now()
    beat = rec.get("heartbeat_at")
    if is_null(beat):
        beat = rec.get("updated_at")
    age = (now - beat).total_seconds() if isinstance(beat, dt.datetime) else None
    pid, host = rec.get("owner_pid"), rec.get("owner_host")
    if not is_null(pid) and host == socket.gethostname():
        if not _owner_alive(int(str(pid).split(".")[0]), beat):
            return "interrupted"
        return "interrupted" if age is not None and age > STALE_LOCAL_S else "running"
    return "interrupted" if age is None or age > STALE_REMOTE_S else "running"
