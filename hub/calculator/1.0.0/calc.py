"""The calculator agent: evaluates the arithmetic in its request, without eval().

It answers into $AGENTOS_OUTPUT_FILE (eval suites read it there) and on stdout. A request
that is not arithmetic (words) gets no answer: the agent says so and exits 1.
"""

from __future__ import annotations

import ast
import operator
import os
import re
import sys

OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        if isinstance(node.op, ast.Pow) and abs(value(node.right)) > 64:
            raise ValueError("exponent too large")
        return OPERATORS[type(node.op)](value(node.left), value(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](value(node.operand))
    raise ValueError("not arithmetic")


def solve(request: str, worktree: str, context: str) -> int:
    text = re.sub(r"^\s*(what is|compute|calculate)\s+", "", request.strip(), flags=re.I)
    text = text.rstrip(" ?.=")
    try:
        result = value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        print(f"calculator: cannot answer {request!r}: {exc}", file=sys.stderr)
        return 1
    answer = f"{result:g}" if isinstance(result, float) else str(result)
    out = os.environ.get("AGENTOS_OUTPUT_FILE")
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(answer + "\n")
    print(answer)
    return 0
