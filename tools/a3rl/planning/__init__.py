"""Planning and validation: pure logic that turns the inventory into checked plans.

Run plans and their checks (``plan``, ``hydra_check``, ``job_profile``,
``checkpointing``), preflight's rules (``preflight``), the artifact manifest and the
datasets (``manifest``, ``datasets``, ``dataset_store``, ``converter_version``), recipe
drift (``drift``), derived env and Ray values (``recipe_env``, ``ray``), image archives
(``images``) and the role variables (``rolevars``). Filter plugins and the controller
call it; it imports the node side and the package's shared helpers (``a3rl.paths``,
``a3rl.files``, ``a3rl.masking``), never the controller or the simulator
(``tests/unit/test_layers.py``).
"""
