"""Answer domains shipped as package data, and their loaders.

A domain is a folder of four files a user can replace: labelled queries (``corpus.jsonl``),
templates (``templates.json``), intents with canned replies (``intents.json``) and trained
intent models (``intent-*.npz``). ``cards/`` is the credit-card customer-service domain the
server's template and classifier tiers and the autocomplete app use by default.
"""
