"""The node side: code that Ansible modules carry to the nodes and run there.

Every file here is linked from ``plugins/module_utils/a3rl_<name>.py``, so a module can
import it as ``ansible.module_utils.a3rl_<name>`` and Ansible ships it inside the
module's payload, to run with the node's own Python. Hence two rules, which
``tests/unit/test_layers.py`` enforces: standard library only (the one optional client,
the ModelScope package on a fetch host, is imported late behind an ImportError that names
the fix), and no other a3rl module but a sibling imported in two steps: first as
``ansible.module_utils.a3rl_<x>`` (Ansible packs it into the payload beside the module),
then, when that fails, as ``a3rl.node.<x>`` (the controller, the tests). ``common.py``,
the sha256 and git helpers, is shared that way.

The controller imports the same code as ``a3rl.node.<name>`` (plans, reports, tests).
"""
