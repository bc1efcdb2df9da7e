"""The Schema-Guided Dialogue benchmark: SGD's service schemas as definitions, its dialogues replayed user turn by
user turn through the public API, and every turn scored as SGD's own evaluation scores a dialogue-state tracker.

Data: ``../shared/sgd/`` (SGD's dev split, CC BY-SA 4.0; see ``benchmarks/SGD.md`` for the attribution).
"""
