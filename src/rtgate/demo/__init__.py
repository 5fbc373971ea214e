"""``rtgate demo``: the scenario runner and its report (:mod:`rtgate.demo.runner`), and the
gate's own scenario (:mod:`rtgate.demo.gate_scenario`). The applications contribute theirs.
"""
