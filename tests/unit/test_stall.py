"""The stall bound's judgement (a3rl.node.stall): which observations are progress, when
a run counts as stalled, and the py-spy main-thread digest cluster_ops reads."""

from __future__ import annotations

from a3rl.node import cluster_ops, stall

T0 = 1000.0


def _obs(*procs, smi=None):
    """One node's answer of ``cluster_ops progress``: (pid, cpu, stack) per process."""
    return {"trainers": [{"pid": pid, "cpu": cpu, "stack": st} for pid, cpu, st in procs],
            "npu_smi": smi}


def _run(tracker, rounds, every=10.0, log=None):
    """Feed ``rounds`` (a function of the round's index to the nodes' answers) every
    ``every`` seconds; the first round at which it is stalled, or None."""
    for i in range(60):
        now = T0 + i * every
        if log is not None:
            tracker.log(log(i), now)
        tracker.nodes(rounds(i), now)
        if tracker.stalled(now):
            return i
    return None


def test_a_stopped_process_and_its_waiting_peers_stall_after_the_bound():
    # Steps move the stacks and CPU for 5 rounds, then everything stands still.
    def rounds(i):
        k = min(i, 5)
        return {"10.0.0.1": _obs((11, 10.0 * k, f"s{k}"), (12, 3.0 * k, f"t{k}")),
                "10.0.0.2": _obs((21, 10.0 * k, f"u{k}"))}
    t = stall.Tracker(60)
    at = _run(t, rounds)
    # Last progress at round 5 (T0 + 50); stalled once more than 60 s passed: round 12.
    assert at == 12
    assert t.quiet(T0 + 120) == 70
    assert "no progress for 70 s, more than the stall bound of 60 s" in t.why(T0 + 120)
    assert "10.0.0.2 70 s" in t.why(T0 + 120)


def test_a_spinning_wait_burns_cpu_but_keeps_its_stack():
    # An HCCL-style wait that spins: CPU time grows a core a second, the stack stays.
    t = stall.Tracker(60)
    assert _run(t, lambda i: {"a": _obs((1, 10.0 * i, "waiting"))}) == 7


def test_cpu_time_alone_is_progress_without_stacks_but_ray_threads_are_not():
    busy = stall.Tracker(60)
    assert _run(busy, lambda i: {"a": _obs((1, 5.0 * i, None))}) is None  # half a core
    idle = stall.Tracker(60)  # 0.05 cores: a waiting actor's heartbeats and gRPC
    assert _run(idle, lambda i: {"a": _obs((1, 0.5 * i, None))}) == 7


def test_the_log_growing_is_progress():
    t = stall.Tracker(60)
    still = {"a": _obs((1, 0.0, "same"))}
    assert _run(t, lambda i: still, log=lambda i: "x" * i) is None
    t = stall.Tracker(60)
    assert _run(t, lambda i: still, log=lambda i: "same log") == 7


def test_a_step_is_progress():
    t = stall.Tracker(60)
    t.nodes({"a": _obs((1, 0.0, "same"))}, T0)
    t.step(T0 + 50)
    t.nodes({"a": _obs((1, 0.0, "same"))}, T0 + 100)
    assert not t.stalled(T0 + 100) and t.stalled(T0 + 111)


def test_new_or_gone_trainer_processes_are_progress():
    def rounds(i):
        return {"a": _obs(*[(p, 0.0, "idle") for p in range(1, 2 + min(i, 8))])}
    t = stall.Tracker(60)
    assert _run(t, rounds) == 15  # new pids until round 8


def test_nothing_counts_before_the_first_trainer_process():
    # Start-up (the job's driver importing, Ray placing actors): the step bound's time.
    t = stall.Tracker(60)
    assert _run(t, lambda i: {"a": _obs()}) is None
    assert t.quiet(T0 + 1000) is None


def test_no_stall_is_declared_on_a_read_that_missed_a_node():
    t = stall.Tracker(60)
    t.nodes({"a": _obs((1, 0.0, "x")), "b": _obs((2, 0.0, "y"))}, T0)
    t.nodes({"a": _obs((1, 0.0, "x")), "b": {"error": "GetTimeoutError"}}, T0 + 100)
    assert not t.stalled(T0 + 100)
    t.nodes({"a": _obs((1, 0.0, "x"))}, T0 + 110)  # b not answered at all
    assert not t.stalled(T0 + 110)
    t.nodes({"a": _obs((1, 0.0, "x")), "b": _obs((2, 0.0, "y"))}, T0 + 120)
    assert t.stalled(T0 + 120)


SMI = """\
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 180.0       40                0    / 0             |
| 0     0                   | 0000:9D:00.0  | {a}           0    / 0          3000 / 65536         |
+---------------------------+---------------+----------------------------------------------------+
| 0     Ascend910           | OK            | -           38                0    / 0             |
| 1     1                   | 0000:9F:00.0  | {b}           0    / 0          3000 / 65536         |
+===========================+===============+====================================================+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
| 0       0                 | 4242          | python3                  | 3000                    |
"""


def test_npu_aicore_above_zero_is_progress():
    assert stall.aicore(SMI.format(a=0, b=37)) == [0.0, 37.0]
    t = stall.Tracker(60)
    still = (1, 0.0, "same")
    assert _run(t, lambda i: {"a": _obs(still, smi=SMI.format(a=0, b=12))}) is None
    t = stall.Tracker(60)
    assert _run(t, lambda i: {"a": _obs(still, smi=SMI.format(a=0, b=0))}) == 7


def test_the_sampling_interval_is_a_sixth_of_the_bound_at_least_a_poll():
    assert stall.Tracker(600).every(30) == 100
    assert stall.Tracker(60).every(30) == 30


DUMP = """\
Process 4242: ray::WorkerDict.actor_rollout_generate_sequences
Python v3.10.12 (/usr/bin/python3.10)

Thread 4242 (idle): "MainThread"
    wait (threading.py:320)
    get (ray/_private/worker.py:2771)
Thread 4300 (active): "ray_import_thread"
    _run (ray/_private/import_thread.py:70)
"""


def test_the_digest_reads_the_main_thread_only():
    assert cluster_ops._main_thread(DUMP) == ("wait (threading.py:320)\n"
                                              "get (ray/_private/worker.py:2771)")
    other = DUMP.replace("import_thread.py:70", "import_thread.py:71")
    assert cluster_ops._main_thread(other) == cluster_ops._main_thread(DUMP)
