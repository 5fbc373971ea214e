"""Scenario 4: a 60 fps game loop whose NPCs get *intents* from language models.

The frame logic is a state machine (:mod:`.world`); the models only propose intents
(:mod:`.intent`), asynchronously, through the sync facade (:mod:`rtgate.gate.sync_facade`). See
:mod:`.game` for the loop and :mod:`.bench` for ``rtgate bench npc``.
"""
