"""The run supervisor's hands on every node: a Ray driver run on the head, where Ray is.

The supervisor (``supervisor.py``) runs on the head's host; this file is piped to
``python3 -`` in the head's training container (or on the host in Ray's host mode) with
an action and its JSON arguments, connects to the running cluster and runs one task
pinned to each live node (``NodeAffinitySchedulingStrategy``, ``num_cpus=0``: a job that
holds every CPU does not block it). It prints one JSON document: ``{"nodes": {ip:
result}}``, each result with the node's clock and the head's at the midpoint of the
shortest round trip of a task that reads it (``clock``, ``head_clock``, ``clock_error``
= half that round trip), for the clock offset.

Actions:

* ``report``: what the forensic bundle holds of a node: verl's trainer processes (Ray
  actors ``ray::TaskRunner``, ``ray::WorkerDict``) with their state and stacks
  (``py-spy dump`` where it is installed; otherwise the kernel's ``/proc/<pid>/stack``
  and ``wchan``, which say where a process waits but not its Python frames), the last
  lines of Ray's logs written since the attempt started (every session's: a node whose
  Ray restarted keeps the logs of the session that failed), the kernel log's OOM kills,
  ``npu-smi info``, the Ascend plog files written since, and the raw outputs the
  supervisor judges health from (``npu-smi info``, ``hccn_tool -net_health``).
* ``health``: only those raw health outputs.
* ``progress``: what the supervisor's stall bound judges (``stall.py``), cheap enough
  for every few polls: each trainer process's CPU time (utime + stime) and, where
  py-spy is installed, a digest of its title and main thread's stack (``py-spy dump
  --nonblocking``: read without pausing the process, so it works on a stopped one and
  never slows a running one), and ``npu-smi info`` where it is installed.
* ``kill``: every trainer process left on the node, and every process that still has an
  NPU's device file (``/dev/davinciN``) open, is sent SIGCONT and SIGKILL (a stopped
  process must run again to die in an orderly way; SIGKILL needs no cooperation); then
  the node is read again (``left``: what still runs or holds a device a few seconds
  later). A process with a device file open is what the vendor's driver installer calls
  an occupied device (docs/vendor-behaviour.md, "devices in use"); a crashed run's
  leftovers hold the devices the next attempt needs.

Standard library and Ray only. Ray 2.48 (the recipe's) and 2.60 both have the calls used
(``ray.nodes``, ``ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy``).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

# Process titles Ray gives verl's actors (``ray::<class>`` and ``ray::<class>.<method>``).
TRAINER_TITLES = ("ray::TaskRunner", "ray::WorkerDict")
LOG_GLOBS = ("/tmp/ray/session_*/logs/*.out", "/tmp/ray/session_*/logs/*.err",
             "/tmp/ray/session_*/logs/*.log")
PLOG_GLOBS = ("/root/ascend/log/*/plog/*.log", "/root/ascend/log/plog/*.log")
# What one node's report reads of its logs (module docstring).
MAX_LOG_FILES = 64
MAX_PLOG_FILES = 16
MAX_FILE_BYTES = 64 * 1024
MAX_TOTAL_BYTES = 3 * 1024 * 1024
MAX_SKIPPED = 100
NPU_SMI = ("npu-smi", "/usr/local/bin/npu-smi")
HCCN_TOOL = ("hccn_tool", "/usr/local/Ascend/driver/tools/hccn_tool", "/usr/local/sbin/hccn_tool")


def _run(argv: list[str], timeout: float = 30) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False)
        return {"rc": done.returncode, "out": done.stdout[-200_000:],
                "err": done.stderr[-20_000:]}
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"rc": None, "out": "", "err": str(e)}


def _tool(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or (name if os.path.isabs(name) and os.access(name, os.X_OK)
                                       else None)
        if found:
            return found
    return None


def trainers(titles: tuple[str, ...] = TRAINER_TITLES) -> list[dict]:
    """verl's actor processes on this node: pid, title, state (R, S, D, T: stopped...)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if title.startswith(titles):
            found.append({"pid": int(entry), "title": title[:200], "state": state})
    return found


DEVICE = re.compile(r"^/dev/davinci[0-9]+$")


def holders(device: re.Pattern = DEVICE) -> list[dict]:
    """Processes on this node (but this one) with an NPU's device file open: pid, title,
    devices."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        devices = set()
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                try:
                    target = os.readlink(f"/proc/{entry}/fd/{fd}")
                except OSError:
                    continue
                if device.match(target):
                    devices.add(target)
            if not devices:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append({"pid": int(entry), "title": title[:200], "devices": sorted(devices)})
    return found


def _stack(pid: int, spy: str | None) -> dict:
    if spy:
        got = _run([spy, "dump", "--pid", str(pid)], timeout=60)
        if got["rc"] != 0:
            # py-spy pauses the process to read a consistent stack, which fails on one
            # already stopped (SIGSTOP, a debugger): read it as it stands.
            got = _run([spy, "dump", "--nonblocking", "--pid", str(pid)], timeout=60)
        if got["rc"] == 0:
            return {"tool": "py-spy", "text": got["out"]}
        fallback = f"py-spy failed ({got['err'].strip()[:300]}); "
    else:
        fallback = "py-spy is not installed in the training container; "
    out = {"tool": "kernel", "text": fallback + "kernel stack and wait channel follow\n"}
    for name in ("wchan", "stack"):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                out["text"] += f"--- /proc/{pid}/{name}\n{f.read()}\n"
        except OSError as e:
            out["text"] += f"--- /proc/{pid}/{name}: {e}\n"
    return out


def _root(pattern: str) -> str:
    """The folder a log glob starts from: its components before the first wildcard."""
    parts = pattern.split("/")
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return "/".join(parts[:fixed]) or "/"


class _Refused(Exception):
    """A log file the report does not read (the message says why)."""


def _open_log(path: str, real: str) -> tuple[int, os.stat_result]:
    """``path`` opened for reading, or _Refused: not a regular file of this user with
    one name, or not the file ``real`` (the name without symlinks) once it is open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise _Refused(f"cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Refused("not a regular file")
        if st.st_nlink != 1:
            raise _Refused(f"a hard link ({st.st_nlink} names)")
        if st.st_uid != os.geteuid():
            raise _Refused(f"owned by uid {st.st_uid}, not {os.geteuid()} (Ray's user)")
        try:
            opened = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            opened = real
        if opened != real:
            raise _Refused(f"moved while it was opened (to {opened})")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _tail(fd: int, size: int, lines: int, limit: int) -> str:
    """The last ``lines`` lines of an open file, at most ``limit`` bytes of them."""
    start = max(0, size - limit)
    data = os.pread(fd, limit, start)
    if start and b"\n" in data[:-1]:  # the first line is cut: drop it, if not the only one
        data = data[data.find(b"\n") + 1:]
    text = "\n".join(data.decode(errors="replace").splitlines()[-lines:] if lines > 0
                     else [])
    raw = text.encode()
    return raw[-limit:].decode(errors="ignore") if len(raw) > limit else text


def read_logs(sets: dict[str, tuple[tuple[str, ...], int]], since: float,
              lines: int) -> dict:
    """The tails of the log files written since ``since``: ``sets`` maps a name to (globs,
    at most so many files); the newest files first, within MAX_FILE_BYTES each and
    MAX_TOTAL_BYTES in all. Returns ``{name: {path: text}}``, ``mtimes``, ``skipped``."""
    out: dict = {name: {} for name in sets}
    skipped: list[dict] = []
    chosen = []
    for name, (patterns, most) in sets.items():
        found, seen = [], set()
        for pattern in patterns:
            root = _root(pattern)
            real_root = os.path.realpath(root)
            for path in sorted(glob.glob(pattern)):
                # The name as it would resolve without a symlink below the root.
                expected = os.path.join(real_root, os.path.relpath(path, root))
                real = os.path.realpath(path)
                if real != expected:
                    if not real.startswith(real_root.rstrip("/") + "/"):
                        skipped.append({"path": path, "why": (
                            f"a symlink to {real}" if os.path.islink(path) else
                            f"reached through a symlink (to {real})") + ", out of " + root})
                    # else: another name of a file inside the root (session_latest): the
                    # glob finds it under its own name.
                    continue
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if st.st_mtime >= since and (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    found.append((st.st_mtime, path, real, name))
        found.sort(key=lambda f: f[0], reverse=True)
        chosen += found[:most]
        skipped += [{"path": f[1], "why": f"over the node's bound of {most} files"}
                    for f in found[most:]]
    chosen.sort(key=lambda f: f[0], reverse=True)
    total = 0
    mtimes = {}
    for mtime, path, real, name in chosen:
        try:
            fd, st = _open_log(path, real)
        except _Refused as e:
            skipped.append({"path": path, "why": str(e)})
            continue
        try:
            text = _tail(fd, st.st_size, lines, MAX_FILE_BYTES)
        except OSError as e:
            skipped.append({"path": path, "why": f"cannot be read ({e.strerror})"})
            continue
        finally:
            os.close(fd)
        size = len(text.encode())
        if total + size > MAX_TOTAL_BYTES:
            skipped.append({"path": path, "why": f"over the node's bound of "
                            f"{MAX_TOTAL_BYTES} bytes"})
            continue
        total += size
        out[name][path] = text
        mtimes[path] = mtime
    if len(skipped) > MAX_SKIPPED:
        skipped = [*skipped[:MAX_SKIPPED],
                   {"path": "", "why": f"{len(skipped) - MAX_SKIPPED} more left out"}]
    return {**out, "mtimes": mtimes, "skipped": skipped}


def health(npus: int, net: bool = True) -> dict:
    """The raw outputs the supervisor judges a node's health from (``net``: also every
    NPU port's ``hccn_tool -net_health``)."""
    out: dict = {}
    smi = _tool(NPU_SMI)
    out["npu_smi"] = _run([smi, "info"]) if smi else None
    tool = _tool(HCCN_TOOL) if net else None
    if tool:
        out["net_health"] = {str(d): _run([tool, "-i", str(d), "-net_health", "-g"])["out"]
                             for d in range(npus)}
    else:
        out["net_health"] = None
    return out


def utc_offsets(since: float, now: float) -> list[list[int]]:
    """This node's zone from ``since`` to ``now`` (at most the last 400 days):
    ``[[from, seconds east of UTC], ...]``, a new entry at each change (daylight saving
    time), found a day at a time, then to the second."""
    start = int(max(since, now - 400 * 86400))

    def off(t: int) -> int:
        return time.localtime(t).tm_gmtoff

    out = [[start, off(start)]]
    t = start
    while t < now:
        step = int(min(t + 86400, now))
        if off(step) != out[-1][1]:
            lo, hi = t, step
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if off(mid) == out[-1][1] else (lo, mid)
            out.append([hi, off(hi)])
        t = max(step, t + 1)
    return out


def report(since: float, lines: int, npus: int, net: bool = True) -> dict:
    # Ray's own Python ships py-spy with ray[default]: beside the interpreter, if not on PATH.
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    spy = shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)
    procs = trainers()
    for p in procs:
        p["stack"] = _stack(p["pid"], spy)
    got = read_logs({"logs": (LOG_GLOBS, MAX_LOG_FILES), "plogs": (PLOG_GLOBS,
                                                                   MAX_PLOG_FILES)},
                    since, lines)
    dmesg = _run(["dmesg", "-T"])
    oom = [line for line in dmesg["out"].splitlines()
           if any(k in line for k in ("Out of memory", "oom-kill", "Killed process"))]
    return {"trainers": procs, "holders": holders(), **got,
            "bounds": {"files": MAX_LOG_FILES, "plog_files": MAX_PLOG_FILES,
                       "file_bytes": MAX_FILE_BYTES, "total_bytes": MAX_TOTAL_BYTES},
            "utc_offsets": utc_offsets(since, time.time()),
            "oom": oom if dmesg["rc"] == 0 else None,
            "oom_error": None if dmesg["rc"] == 0 else (dmesg["err"] or "dmesg failed")[:300],
            **health(npus, net)}


def _main_thread(dump: str) -> str:
    """The frames of the main thread in a ``py-spy dump`` (the lines after its
    ``Thread <id> (...): "MainThread"`` header, up to the next thread), stripped."""
    frames, inside = [], False
    for line in dump.splitlines():
        if line.startswith("Thread "):
            inside = line.rstrip().endswith('"MainThread"')
            continue
        if inside and line.strip():
            frames.append(line.strip())
    return "\n".join(frames)


def progress() -> dict:
    """Per trainer process: pid, CPU seconds, and the digest of its title and main
    thread's stack (None without py-spy, or when it could not read one)."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    spy = shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)
    tick = os.sysconf("SC_CLK_TCK")
    procs = []
    for p in trainers():
        try:
            with open(f"/proc/{p['pid']}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
        stack = None
        if spy:
            got = _run([spy, "dump", "--nonblocking", "--pid", str(p["pid"])], timeout=20)
            frames = _main_thread(got["out"]) if got["rc"] == 0 else ""
            if frames:
                stack = hashlib.sha1((p["title"] + "\n" + frames).encode()).hexdigest()
        procs.append({"pid": p["pid"], "state": p["state"], "cpu": cpu, "stack": stack})
    smi = _tool(NPU_SMI)
    info = _run([smi, "info"]) if smi else None
    return {"trainers": procs,
            "npu_smi": info["out"] if info and info["rc"] == 0 else None}


def kill(settle: float = 10.0, titles: tuple[str, ...] = TRAINER_TITLES,
         device: re.Pattern = DEVICE) -> dict:
    """Trainers and device holders killed; ``left``: those still there after ``settle``
    seconds at most (SIGKILL is delivered at once, the exit and the closing of the
    device files take the kernel a moment)."""
    killed = []
    seen = set()
    for p in trainers(titles) + holders(device):
        if p["pid"] in seen:
            continue
        seen.add(p["pid"])
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(p["pid"], sig)
            except OSError:
                pass
        killed.append(p)
    deadline = time.time() + settle
    left = trainers(titles) + holders(device)
    while left and time.time() < deadline:
        time.sleep(0.5)
        left = trainers(titles) + holders(device)
    return {"killed": killed, "left": left}


# Round trips of the clock probe per node; the shortest one's midpoint is taken.
CLOCK_PROBES = 3


def _now() -> float:
    """The node's clock (a Ray task: a function, not the builtin)."""
    return time.time()


def on_node(action: str, args: dict) -> dict:
    """One node's part, run as a Ray task pinned to it."""
    started = time.time()
    if action == "report":
        body = report(float(args.get("since", 0)), int(args.get("lines", 300)),
                      int(args.get("npus", 0)), bool(args.get("net", True)))
    elif action == "health":
        body = health(int(args.get("npus", 0)), bool(args.get("net", True)))
    elif action == "kill":
        body = kill()
    elif action == "progress":
        body = progress()
    else:
        raise ValueError(f"unknown action {action}")
    return {"host": socket.gethostname(), "clock": started, **body}


def main(argv: list[str]) -> int:
    action, args = argv[1], json.loads(argv[2]) if len(argv) > 2 else {}
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as e:
        print(json.dumps({"nodes": {}, "error": f"no Ray where cluster_ops ran ({e}). Fix: "
                          "run_supervisor_ops_command must run the Python that has Ray"}))
        return 2

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    task = ray.remote(num_cpus=0, max_retries=0)(on_node)
    out: dict = {}
    pending = {}
    strategies = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        ip = node.get("NodeManagerAddress")
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        strategies[ip] = strategy
        pending[ip] = (time.time(), task.options(scheduling_strategy=strategy).remote(action,
                                                                                      args))
    deadline = time.time() + float(args.get("timeout", 180))
    for ip, (_sent, ref) in pending.items():
        try:
            out[ip] = ray.get(ref, timeout=max(1.0, deadline - time.time()))
        except Exception as e:  # noqa: BLE001  (a node that fails is reported, not fatal)
            out[ip] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
    # Each node's clock against the head's, from the shortest of a few round trips of a
    # task that only reads the clock (the report's own round trip takes seconds).
    probe = ray.remote(num_cpus=0, max_retries=0)(_now)
    for ip, result in out.items():
        if "error" in result:
            continue
        best = None
        for _ in range(CLOCK_PROBES):
            sent = time.time()
            try:
                node_clock = ray.get(probe.options(scheduling_strategy=strategies[ip]).remote(),
                                     timeout=10)
            except Exception:  # noqa: BLE001  (no offset rather than no report)
                break
            back = time.time()
            if best is None or back - sent < 2 * best[2]:
                best = (node_clock, (sent + back) / 2, (back - sent) / 2)
        if best is not None:
            result["clock"], result["head_clock"], result["clock_error"] = best
    print(json.dumps({"nodes": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
