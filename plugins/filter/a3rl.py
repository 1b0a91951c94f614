"""Ansible filters backed by the ``a3rl`` package (logic and its tests live there)."""

from __future__ import annotations

from a3rl import images, npu, preflight


class FilterModule:
    def filters(self):
        return {
            "a3rl_topology_problems": preflight.topology_problems,
            "a3rl_nic_for_ip": preflight.nic_for_ip,
            "a3rl_nic_problems": preflight.nic_problems,
            "a3rl_npu_device_problems": preflight.npu_device_problems,
            "a3rl_disk_problems": preflight.disk_problems,
            "a3rl_parse_df": preflight.parse_df,
            "a3rl_os_problems": preflight.os_problems,
            "a3rl_parse_kv": npu.parse_kv,
            "a3rl_docker_archive_id": images.archive_image_id,
            "a3rl_registry_host": images.registry_host,
            "a3rl_package_action": npu.package_action,
            "a3rl_parse_npu_smi_info": npu.parse_npu_smi_info,
            "a3rl_npu_health_problems": npu.npu_health_problems,
            "a3rl_container_devices": npu.container_devices,
        }
