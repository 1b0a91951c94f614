"""The simulated A3 cluster: podman containers acting as NPU nodes.

Real SSH, systemd, container engine and Ray; stand-ins only for what cannot exist
without Ascend hardware (devices, vendor packages, ``npu-smi``), see ``standins``.
"""
