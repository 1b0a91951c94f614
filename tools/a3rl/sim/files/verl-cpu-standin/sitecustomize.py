"""STAND-IN layer of the simulator (not verl, not the recipe): Python imports this at the
start of every process whose path has this folder, i.e. every process of a simulator
training job, whose Ray runtime environment puts it on PYTHONPATH (the simulator's CPU
profile of a plan, a3rl.sim.cpu_profile). It only registers an import hook; what the
hook changes, and when (never with a CUDA or NPU device), is in a3rl_verl_cpu_standin."""

try:
    import a3rl_verl_cpu_standin

    a3rl_verl_cpu_standin.install()
except Exception as e:  # a broken stand-in must not hide the job's own error
    import sys

    print(f"a3rl verl CPU stand-in: not installed: {e!r}", file=sys.stderr)
