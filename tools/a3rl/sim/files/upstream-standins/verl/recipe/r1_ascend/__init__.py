# STAND-IN made by a3rl's simulator for verl v0.6.0's recipe/r1_ascend/__init__.py
# (the PyPI sdist has no recipe/).
