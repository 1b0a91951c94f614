"""Ansible filters backed by the ``a3rl`` package (logic and its tests live there)."""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError

from a3rl import images, manifest, npu, preflight, ray, recipe_env


def _clear_errors(fn):
    """Input errors become Ansible filter errors carrying only our message (host, fix)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (recipe_env.RecipeEnvError, ray.RayConfigError, ValueError) as e:
            raise AnsibleFilterError(str(e)) from None

    return wrapper


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
            "a3rl_model_env": _clear_errors(recipe_env.model_env),
            "a3rl_reserved_ports": _clear_errors(recipe_env.reserved_ports),
            "a3rl_port_range": _clear_errors(recipe_env.port_range),
            "a3rl_ray_auth_mode": _clear_errors(ray.auth_mode),
            "a3rl_ray_supports_token": ray.supports_token_auth,
            "a3rl_ray_ports": _clear_errors(ray.ports),
            "a3rl_ray_firewall_rules": _clear_errors(ray.firewall_rules),
            "a3rl_ray_start_args": _clear_errors(ray.start_args),
            "a3rl_ray_dashboard_url": ray.dashboard_url,
            "a3rl_ray_installed_version": ray.installed_version,
            "a3rl_ray_membership": ray.membership,
            "a3rl_artifact_names": manifest.artifact_names,
            "a3rl_artifact_problems": manifest.artifact_problems,
            "a3rl_node_files": _clear_errors(manifest.node_files),
            "a3rl_artifact_file": _clear_errors(manifest.artifact_file),
            "a3rl_git_checkout_spec": _clear_errors(manifest.git_checkout_spec),
            "a3rl_bundle_spec": manifest.bundle_spec,
            "a3rl_patch_strip": manifest.patch_strip,
            "a3rl_checksum_lines": manifest.checksum_lines,
        }
