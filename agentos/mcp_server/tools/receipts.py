"""The MCP tools receipts_list and receipt_show: the audit trail."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentos.mcp_server import models as m
from agentos.mcp_server.tools.common import NAME_MAX, READ_ONLY, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace) -> None:
    """The tools receipts_list and receipt_show."""

    @tool("List receipts", **READ_ONLY)
    async def receipts_list(
        run_id: Annotated[
            str | None, Field(max_length=NAME_MAX, description="Only this run's receipts.")
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=1000, description="At most this many, the newest.")
        ] = 50,
    ) -> m.ReceiptList:
        """List receipts (every routing decision, interview, gate result, guardian
        intervention and merge) in chain order: id, kind, time, run."""

        def work() -> m.ReceiptList:
            from agentos.receipts import list_receipts

            found = list_receipts(ws, run_id=run_id)
            return m.ReceiptList(
                total=len(found),
                receipts=[m.ReceiptSummary.model_validate(r.as_dict()) for r in found[-limit:]],
            )

        return await call(work)

    @tool("Show a receipt", **READ_ONLY)
    async def receipt_show(
        id: Annotated[
            str, Field(max_length=NAME_MAX, description="A receipt id, like 00000042 or 42.")
        ],
    ) -> m.ReceiptText:
        """The full text of one receipt, exactly as written (also the resource
        agentos://receipts/{id})."""
        return await call(receipt_text, ws, id)


def receipt_text(ws: Workspace, rid: str) -> m.ReceiptText:
    """One receipt, as receipt_show and the resource agentos://receipts/{id} give it."""
    from agentos.receipts import load_receipt

    parsed = load_receipt(ws, rid)
    return m.ReceiptText(
        id=parsed.id,
        kind=parsed.kind or "?",
        time=parsed.time or "?",
        run_id=parsed.run_id,
        fields=parsed.fields,
        text=parsed.text,
    )
