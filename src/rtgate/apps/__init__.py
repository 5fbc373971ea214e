"""Applications built on rtgate: each scenario is a subpackage."""
