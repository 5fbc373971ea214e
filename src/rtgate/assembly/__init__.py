"""From configuration to a running gate: one builder per tier kind
(:mod:`rtgate.assembly.kinds`), and :func:`~rtgate.assembly.build.assemble`, which builds
every configured tier, wraps it in its resilience policy and hands the list to the gate.
"""
