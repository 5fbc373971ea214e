"""The industrial acoustic guard (scenario 2).

A small detector on 20 ms windows and a deterministic rule engine stop the line over MQTT;
a language model writes the work order afterwards, in the background. The stop path
(``audio`` -> ``features`` -> ``detector`` -> ``rules`` -> ``mqtt``, tied by ``pipeline``)
imports no language-model code; ``explain`` hangs off the side, fed by a bounded queue.

This package imports nothing on purpose: import the module you need.
"""
