"""From configuration to a running gate: :func:`~rtgate.assembly.build.assemble` builds
every declared tier with its kind (found in the registry, :mod:`rtgate.kinds`), wraps each
in its resilience policy and hands the list to the gate.
"""
