"""The simulator's training images, built beside the tests (``A3RL_TEST_PREBUILD=1``,
which ``make test`` sets).

On a fresh machine (CI) the real-verl layer (~5 min, 2.9 GB) and the Ray 2.60 layer were
built inside the first module that needed them, on that worker's time, while much of the
build waits on the network and the disk. Started by the pytest controller when the
session starts, in a thread of its own, they are built while the first modules run
(``a3rl.sim.cluster.build_images``; each build holds its lock, so a module that needs
an image meanwhile waits for it, never builds it twice). Where every image is built
already, it only finds them. A failure is reported at the end; the module that needs
the image then builds it itself and fails with its own message.
"""

from __future__ import annotations

import threading
import time
import traceback

from a3rl.paths import cache_dir

VARIABLE = "A3RL_TEST_PREBUILD"
_outcome: dict[str, object] = {}


def _run() -> None:
    from a3rl.sim import cluster, podman

    t0 = time.monotonic()
    log_path = cache_dir() / "prebuild.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        def say(msg: str) -> None:
            log.write(f"{time.monotonic() - t0:7.1f} {msg}\n")
            log.flush()

        problem = podman.available()
        if problem:
            _outcome.update(skipped=problem)
            say(f"not built: {problem}")
            return
        try:
            built = cluster.build_images(say)
        except Exception:  # noqa: BLE001 - reported at the end; the tests build again
            _outcome.update(failed=traceback.format_exc(limit=3), seconds=time.monotonic() - t0)
            say(str(_outcome["failed"]))
            return
        _outcome.update(seconds=time.monotonic() - t0, refs=[a.ref for a in built])
        say(f"done: {', '.join(a.ref for a in built)}")


def start() -> None:
    threading.Thread(target=_run, name="a3rl-prebuild", daemon=True).start()


def summary_line() -> str | None:
    """One line for the end of the run, or None when nothing was started."""
    if not _outcome:
        return "images built beside the tests: still building at the end" \
            if any(t.name == "a3rl-prebuild" for t in threading.enumerate()) else None
    if "skipped" in _outcome:
        return f"images built beside the tests: not built ({_outcome['skipped']})"
    if "failed" in _outcome:
        return (f"images built beside the tests: FAILED after {_outcome['seconds']:.0f} s "
                f"(the modules built what they needed): {_outcome['failed']}")
    return (f"images built beside the tests: {len(_outcome['refs'])} ready after "
            f"{_outcome['seconds']:.0f} s (log: .cache/prebuild.log)")
