"""What every concept shares, and nothing above it.

File primitives (:mod:`~agentos.shared.fs`),
YAML and the strict pydantic models it loads into (:mod:`~agentos.shared.yaml`,
:mod:`~agentos.shared.models`), size limits (:mod:`~agentos.shared.limits`), the check specs
written in packages, cards and ``agentos.yaml`` (:mod:`~agentos.shared.checks`), RE2 patterns
(:mod:`~agentos.shared.patterns`), version semantics (:mod:`~agentos.shared.versions`), a
command in its own process group (:mod:`~agentos.shared.process`), words and stems
(:mod:`~agentos.shared.text`), directory change watches (:mod:`~agentos.shared.dirwatch`),
server addresses (:mod:`~agentos.shared.address`), signal handlers for a block
(:mod:`~agentos.shared.signals`) and lazily imported public faces
(:mod:`~agentos.shared.faces`). Each module stands alone; import it by its full name."""
