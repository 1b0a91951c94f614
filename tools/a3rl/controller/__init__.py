"""The controller: what runs on the operator's machine around the plays.

The ``a3rl`` command over ansible-runner (``cli``, ``runner``), run records (``runs``),
the fold of a play's events into its state and the live display (``fold``,
``progress``), a training run's report and goodput (``report``, ``goodput``), the
cluster's health table (``status``) and the strategy a play runs under (``strategy``).
It may import the planning layer and the node side; neither imports it
(``tests/unit/test_layers.py``).
"""
