"""Evolve: AgentOS improves its own agent packages.

The thing that evolves is a hub package; its fitness is an eval suite
(:mod:`agentos.evals`); a meta agent, itself a hub package, changes it; a generation leaves
the loop only as a new hub version (``agentos evolve promote``). The loop is the forge
loop's (propose, mutate, run, test, score; accept, refine or reject) on HyperFlow's archive
and parent selection: :mod:`agentos.evolve.start`, :mod:`agentos.evolve.loop`,
:mod:`agentos.evolve.judge`, :mod:`agentos.evolve.meta`, :mod:`agentos.evolve.archive`,
:mod:`agentos.evolve.selection`.
"""
