"""The MCP server's resources (receipts and routing cards by id) and the completions of
their ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server.fastmcp import FastMCP
from mcp.types import (
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
)

from agentos.errors import NotFound
from agentos.mcp_server.tools.common import call
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.mcp_server.server import AgentOSServer


def register(server: AgentOSServer, ws: Workspace) -> None:
    """The resources, and the completions of their ids."""
    _resources(server, ws)
    _completions(server, ws)


def _resources(server: AgentOSServer, ws: Workspace) -> None:
    """The resources: receipts and cards by id."""

    @server.resource(
        "agentos://receipts/{id}",
        name="receipt",
        mime_type="text/plain",
        description="A receipt by id, exactly as written.",
    )
    async def receipt_resource(id: str) -> str:
        from agentos.mcp_server.tools.receipts import receipt_text  # its family's models

        return (await call(receipt_text, ws, id)).text

    @server.resource(
        "agentos://cards/{id}",
        name="card",
        mime_type="application/yaml",
        description="A routing card by id: its YAML file.",
    )
    async def card_resource(id: str) -> str:
        return await call(_card_text, ws, id)


COMPLETIONS_MAX = 100  # values in one answer; `total` and `hasMore` say how many more


def _completions(server: FastMCP[Any], ws: Workspace) -> None:
    """``completion/complete``: card ids for ``agentos://cards/{id}`` and receipt ids for
    ``agentos://receipts/{id}``, agent names for any argument named ``agent``; nothing
    for what AgentOS does not know."""

    @server.completion()  # type: ignore[no-untyped-call,untyped-decorator]
    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion:
        def candidates() -> list[str]:
            template = ref.uri if isinstance(ref, ResourceTemplateReference) else None
            if template == "agentos://cards/{id}" and argument.name == "id":
                from agentos.routing.cards import load_cards

                return sorted(c.id for c in load_cards(ws.cards_dir).cards)
            if template == "agentos://receipts/{id}" and argument.name == "id":
                from agentos.receipts import list_receipts

                return [r.id for r in reversed(list_receipts(ws))]
            if argument.name == "agent":
                from agentos.hub.store import Hub

                return sorted({v.name for v in Hub(ws.hub_dir).versions()})
            return []

        found = [v for v in await call(candidates) if v.startswith(argument.value)]
        return Completion(
            values=found[:COMPLETIONS_MAX],
            total=len(found),
            hasMore=len(found) > COMPLETIONS_MAX,
        )


def _card_text(ws: Workspace, card_id: str) -> str:
    from agentos.routing.cards import load_cards

    cards = load_cards(ws.cards_dir)
    for card, path in zip(cards.cards, cards.files, strict=True):
        if card.id == card_id:
            return path.read_text(encoding="utf-8")
    raise NotFound(f"no routing card {card_id!r} in {ws.cards_dir}", field="id")
