"""Workflows: phases of tasks that agents extend themselves, each task a run whose gate
(the phase's checks) decides when it is done; near-identical tasks are caught before they
run (:mod:`agentos.workflows.similarity`). Definitions: :mod:`agentos.workflows.definitions`.
"""
