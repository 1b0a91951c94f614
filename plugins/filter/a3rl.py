"""Ansible filters backed by the ``a3rl`` package (logic and its tests live there)."""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError

from a3rl import files, masking
from a3rl.controller import status
from a3rl.node import conversion, metrics, npu
from a3rl.planning import (
    checkpointing,
    drift,
    folders,
    images,
    job_profile,
    manifest,
    plan,
    preflight,
    ray,
    recipe_env,
    supervision,
)


def _clear_errors(fn):
    """Input errors become Ansible filter errors carrying only our message (host, fix)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (recipe_env.RecipeEnvError, ray.RayConfigError, ValueError) as e:
            raise AnsibleFilterError(str(e)) from None

    return wrapper


def plan_job(hostvars_like, algo, model, weights, features, nodes, npus_per_node,
             extra_overrides=None, checkpoint_record=None, checkpointing=None):
    """a3rl.planning.plan.plan_job with the profiles and node paths taken from the play's
    variables; every problem of the plan in one error."""
    v = hostvars_like
    profiles = {k: v.get(k) for k in plan.PROFILE_VARS}
    profiles["paths"] = plan.node_paths(v["a3rl_assets_dir"], v["a3rl_workdir"],
                                        v.get("a3rl_datasets") or {}, v.get("a3rl_manifest") or {})
    try:
        return plan.plan_job(profiles, algo, model, weights, features, nodes, npus_per_node,
                             extra_overrides=extra_overrides or None,
                             checkpoint_record=checkpoint_record or None,
                             checkpointing=checkpointing)
    except plan.PlanError as e:
        raise AnsibleFilterError(str(e)) from None


def dataset_digests(specs, names, record):
    """a3rl.planning.dataset_store.digests (imported here: it needs pyarrow, which only the data
    role's probe uses)."""
    from a3rl.planning import dataset_store

    return dataset_store.digests(specs, names, record)


def recipe_drift(hostvars_like, record, store):
    """a3rl.planning.drift.store_report: where the stored recipe differs from the project."""
    from a3rl.paths import project_root

    return drift.store_report(hostvars_like, record, store, project_root())


class FilterModule:
    def filters(self):
        return {
            "a3rl_topology_problems": preflight.topology_problems,
            "a3rl_setting_problems": preflight.setting_problems,
            "a3rl_firewall_allow_warnings": preflight.firewall_allow_warnings,
            "a3rl_same_machine_problems": preflight.same_machine_problems,
            "a3rl_nic_for_ip": preflight.nic_for_ip,
            "a3rl_nic_problems": preflight.nic_problems,
            "a3rl_npu_device_problems": preflight.npu_device_problems,
            "a3rl_disk_problems": preflight.disk_problems,
            "a3rl_parse_df": preflight.parse_df,
            "a3rl_os_problems": preflight.os_problems,
            "a3rl_parse_kv": npu.parse_kv,
            "a3rl_docker_archive_id": images.archive_image_id,
            "a3rl_registry_host": images.registry_host,
            "a3rl_dockerfile_fixed": _clear_errors(images.dockerfile_fixed),
            "a3rl_package_action": npu.package_action,
            "a3rl_npu_driver_plan": npu.driver_plan,
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
            "a3rl_ray_jump_problems": ray.jump_problems,
            "a3rl_ray_out_chain": _clear_errors(ray.out_chain),
            "a3rl_ray_start_args": _clear_errors(ray.start_args),
            "a3rl_ray_dashboard_url": _clear_errors(ray.dashboard_url),
            "a3rl_ray_installed_version": ray.installed_version,
            "a3rl_ray_membership": ray.membership,
            "a3rl_raylet_node_ids": ray.raylet_node_ids,
            "a3rl_artifact_names": manifest.artifact_names,
            "a3rl_bytes": files.human_bytes,
            "a3rl_plan_job": plan_job,
            "a3rl_job_secrets": masking.job_secrets,
            "a3rl_checkpoint_space_problems": checkpointing.space_problems,
            "a3rl_data_folder_problems": folders.data_problems,
            "a3rl_hang_first_step": checkpointing.hang_first_step_seconds,
            "a3rl_checkpoint_input": _clear_errors(supervision.checkpoint_input),
            "a3rl_supervisor_settings": _clear_errors(supervision.supervisor_settings),
            "a3rl_resume_job": _clear_errors(checkpointing.resume_job),
            "a3rl_in_checkpoint_folder": _clear_errors(checkpointing.in_folder),
            "a3rl_next_attempt": checkpointing.next_attempt,
            "a3rl_run_attempts": checkpointing.attempts,
            "a3rl_attempt_of": checkpointing.attempt_of,
            "a3rl_recipe_drift": recipe_drift,
            "a3rl_job_profile": _clear_errors(job_profile.apply),
            "a3rl_job_profile_applies": job_profile.applies,
            "a3rl_alltoall_overlap": conversion.alltoall_overlap,
            "a3rl_status_report": status.report,
            "a3rl_artifact_problems": manifest.artifact_problems,
            "a3rl_artifact_group_problems": manifest.group_problems,
            "a3rl_node_files": _clear_errors(manifest.node_files),
            "a3rl_store_state": manifest.store_state,
            "a3rl_placed_paths": manifest.placed_paths,
            "a3rl_dataset_digests": dataset_digests,
            "a3rl_artifact_file": _clear_errors(manifest.artifact_file),
            "a3rl_git_checkout_spec": _clear_errors(manifest.git_checkout_spec),
            "a3rl_bundle_spec": manifest.bundle_spec,
            "a3rl_patch_strip": manifest.patch_strip,
            "a3rl_checksum_lines": manifest.checksum_lines,
            "a3rl_progress_line": metrics.progress_line,
        }
