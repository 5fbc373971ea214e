"""Commands that are not an application's: ``serve``, ``keys``, ``worker``, ``fake-llm``,
and the output helpers every command shares (:mod:`rtgate.cli.output`).

Each module holds a typer app; :mod:`rtgate.__main__` mounts them by plain imports.
"""
